"""Admin for operators: address spaces, addresses, users (read-only: changes go through the
service functions), the agents' states and a resync action."""
from django.contrib import admin, messages

from core.admin import ReadOnlyAdmin
from eventlog import fanout

from .models import Address, AddressSpace, AgentState, MessagingUser, RouterIncarnation
from .status import agent_states, space_status


@admin.action(description="Resync the selected address spaces now")
def resync(modeladmin, request, queryset):
    for space in queryset:
        fanout.notify_space(space.uid)
    messages.info(request, f"Resync requested for {queryset.count()} address space(s).")


@admin.register(AddressSpace)
class AddressSpaceAdmin(ReadOnlyAdmin):
    list_display = ["name", "tenant", "type", "plan", "phase", "broker", "last_sequence",
                    "terminating"]
    list_filter = ["type", "plan", "broker", "terminating"]
    search_fields = ["name", "tenant__slug", "uid"]
    actions = [resync]
    readonly_fields = ["connection_details"]

    @admin.display(description="Connection details")
    def connection_details(self, obj):
        from django.utils.html import format_html_join

        from .api.resources import connection_url, endpoints

        rows = [(e["name"], ", ".join(f"{p['name']} {e['serviceHost']}:{p['port']}"
                                      for p in e["servicePorts"])) for e in endpoints(obj)]
        rows += [(f"user {u.username}", connection_url(obj, u.username))
                 for u in obj.users.all()[:20]]
        return format_html_join("", "<div><b>{}</b>: {}</div>", rows)

    @admin.display(description="Phase")
    def phase(self, obj):
        return space_status(obj, agent_states([obj.uid]).get(obj.uid, {})).phase


@admin.register(Address)
class AddressAdmin(ReadOnlyAdmin):
    list_display = ["name", "address", "type", "plan", "scheduled", "pending_reason",
                    "resource_version"]
    list_filter = ["type", "scheduled", "plan"]
    search_fields = ["name", "address", "space__name", "space__tenant__slug"]
    list_select_related = ["space"]


@admin.register(MessagingUser)
class MessagingUserAdmin(ReadOnlyAdmin):
    list_display = ["name", "username", "space", "resource_version"]
    search_fields = ["name", "username", "space__name"]
    exclude = ["password_hash"]


@admin.register(AgentState)
class AgentStateAdmin(ReadOnlyAdmin):
    list_display = ["space_uid", "kind", "applied_sequence", "applied_at", "checked_at",
                    "torn_down", "space_error", "invalidated"]
    list_filter = ["kind", "torn_down"]


@admin.register(RouterIncarnation)
class RouterIncarnationAdmin(ReadOnlyAdmin):
    list_display = ["management_url", "started_at", "uptime_seconds", "checked_at", "restarts"]
