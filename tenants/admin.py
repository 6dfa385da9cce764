"""Admin for operators: tenants with members and quota, plans, personal access tokens."""
from django.contrib import admin

from .models import (
    AddressPlan,
    AddressSpacePlan,
    AddressUsageDaily,
    Invitation,
    Membership,
    PersonalAccessToken,
    QuotaEvaluation,
    Tenant,
    TenantQuota,
    TenantUsageDaily,
    UsageJobRun,
)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


class QuotaInline(admin.StackedInline):
    """Read-only: limits are set through the quota API (tenants.services.set_quota), which
    records tenant.quota_changed and re-evaluates the tenant live (docs/quotas.md)."""

    model = TenantQuota
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "created_at", "deleted_at", "throttled"]
    list_filter = [("deleted_at", admin.EmptyFieldListFilter)]

    @admin.display(boolean=True, description="Throttled")
    def throttled(self, obj):
        return TenantQuota.objects.filter(tenant=obj, throttled=True).exists()

    search_fields = ["slug", "name"]
    # Deleting goes through the API or portal (tenants.services.delete_tenant), so that the
    # address spaces are torn down and the audit trail stays.
    readonly_fields = ["uid", "created_at", "deleted_at"]
    inlines = [QuotaInline, MembershipInline]

    def has_delete_permission(self, request, obj=None):
        return False

    def get_readonly_fields(self, request, obj=None):
        # The name is part of every vhost and broker username of the tenant's spaces.
        return self.readonly_fields + (["slug"] if obj is not None else [])


@admin.register(Invitation)
class InvitationAdmin(admin.ModelAdmin):
    """Read-only: invitations are made, accepted and revoked through their service functions."""

    list_display = ["email", "tenant", "role", "invited_by", "created_at", "expires_at",
                    "accepted_at", "revoked_at"]
    list_filter = ["role"]
    search_fields = ["email", "tenant__slug"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["tenant", "user", "role", "created_at"]
    list_filter = ["role"]
    search_fields = ["tenant__slug", "user__username"]


class PlanAdmin(admin.ModelAdmin):
    """Read-only: plans are written through the plans API (/api/v1/addressplans/, ...), whose
    service functions record each change in the plans stream and re-place the addresses of
    the spaces that use the plan (docs/api.md)."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AddressPlan)
class AddressPlanAdmin(PlanAdmin):
    list_display = ["name", "address_type", "resources", "partitions", "display_order"]
    list_filter = ["address_type"]
    search_fields = ["name"]


@admin.register(AddressSpacePlan)
class AddressSpacePlanAdmin(PlanAdmin):
    list_display = ["name", "address_space_type", "resource_limits", "router_policy",
                    "infra_config_ref"]
    list_filter = ["address_space_type"]


@admin.register(PersonalAccessToken)
class PersonalAccessTokenAdmin(admin.ModelAdmin):
    list_display = ["user", "name", "created_at", "last_used_at", "revoked"]
    list_filter = ["revoked"]
    readonly_fields = ["digest", "created_at", "last_used_at"]


@admin.action(description="Lift the quota throttle for 24 hours (operator override)")
def override_throttle(modeladmin, request, queryset):
    import datetime

    from django.utils import timezone

    from core.context import Context

    from .services import unthrottle

    until = timezone.now() + datetime.timedelta(hours=24)
    for tenant in queryset:
        unthrottle(ctx=Context(actor=f"user:{request.user.get_username()}"), tenant=tenant,
                   reason="operator override", override_until=until)


TenantAdmin.actions = [override_throttle]


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(TenantUsageDaily)
class TenantUsageDailyAdmin(ReadOnly):
    """The heaviest tenants first, per day."""

    list_display = ["day", "tenant", "messages", "bytes", "stored_bytes", "connections"]
    list_filter = ["day"]
    ordering = ["-day", "-messages"]
    search_fields = ["tenant__slug"]


@admin.register(QuotaEvaluation)
class QuotaEvaluationAdmin(ReadOnly):
    list_display = ["day", "tenant", "limit", "used", "limit_value", "share", "breached",
                    "forecast_day"]
    list_filter = ["breached", "limit", "day"]
    ordering = ["-day", "-share"]


@admin.register(UsageJobRun)
class UsageJobRunAdmin(ReadOnly):
    list_display = ["day", "status", "started_at", "seconds", "rows"]
    list_filter = ["status"]
    readonly_fields = ["day", "status", "started_at", "finished_at", "seconds", "rows", "error"]


@admin.register(AddressUsageDaily)
class AddressUsageDailyAdmin(ReadOnly):
    list_display = ["day", "tenant", "space", "address", "messages_in", "messages_out",
                    "bytes_in", "bytes_out", "stored_bytes"]
    list_filter = ["day"]
    ordering = ["-day", "-messages_in"]
    search_fields = ["tenant__slug", "space", "address"]
