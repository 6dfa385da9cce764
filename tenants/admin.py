"""Admin for operators: tenants with members and quota, plans, personal access tokens."""
from django.contrib import admin

from .models import (
    AddressPlan,
    AddressSpacePlan,
    Membership,
    PersonalAccessToken,
    Tenant,
    TenantQuota,
)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


class QuotaInline(admin.StackedInline):
    model = TenantQuota
    can_delete = False


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    readonly_fields = ["uid", "created_at"]
    inlines = [QuotaInline, MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["tenant", "user", "role", "created_at"]
    list_filter = ["role"]
    search_fields = ["tenant__slug", "user__username"]


@admin.register(AddressPlan)
class AddressPlanAdmin(admin.ModelAdmin):
    list_display = ["name", "address_type", "resources", "partitions", "display_order"]
    list_filter = ["address_type"]
    search_fields = ["name"]


@admin.register(AddressSpacePlan)
class AddressSpacePlanAdmin(admin.ModelAdmin):
    list_display = ["name", "address_space_type", "resource_limits", "infra_config_ref"]
    list_filter = ["address_space_type"]
    filter_horizontal = ["address_plans"]


@admin.register(PersonalAccessToken)
class PersonalAccessTokenAdmin(admin.ModelAdmin):
    list_display = ["user", "name", "created_at", "last_used_at", "revoked"]
    list_filter = ["revoked"]
    readonly_fields = ["digest", "created_at", "last_used_at"]
