"""Every event type, applied live to the old projection, equals a rebuild from the whole log."""
from django.core.management import call_command
from django.db import transaction

from config_service import services
from config_service.rebuild import rebuild, snapshot
from eventlog.events import EVENT_TYPES
from eventlog.log import append_tenant_event
from eventlog.models import ConfigEvent, EventStream
from tenants import invitations
from tenants.models import Membership, Role, TenantQuota
from tenants.services import (
    add_member,
    delete_tenant,
    remove_member,
    set_quota,
    throttle,
    unthrottle,
)
from tests.config_service.legacy import legacy_space
from tests.conftest import CTX, b64


def assert_rebuild_equals_live():
    before = snapshot()
    count, diffs = rebuild(check_only=True)
    assert diffs == []
    assert snapshot() == before  # --check changed nothing
    assert count == ConfigEvent.objects.count()


def test_each_event_type_applied_live_equals_a_rebuild(tenant, viewer):
    ctx = CTX
    viewer.email = "vera@example.com"
    viewer.save()
    steps = [
        lambda: set_quota(ctx=ctx, tenant=tenant, max_addresses=500, messages_per_day=1),
        lambda: add_member(ctx=ctx, tenant=tenant, user=viewer, role=Role.ADMIN),
        lambda: remove_member(ctx=ctx, tenant=tenant, username=viewer.username),
        lambda: throttle(ctx=ctx, tenant=tenant, limits=[
            {"limit": "messages_per_day", "used": 2, "limit_value": 1}]),
        lambda: unthrottle(ctx=ctx, tenant=tenant, reason="test"),
        lambda: invitations.revoke(ctx=ctx, invitation=invitations.invite(
            ctx=ctx, tenant=tenant, email="x@example.com", role="viewer", invited_by=None)[0]),
        lambda: invitations.accept(ctx=ctx, user=viewer, invitation=invitations.invite(
            ctx=ctx, tenant=tenant, email=viewer.email, role="viewer", invited_by=None)[0]),
    ]
    for step in steps:
        step()
        assert_rebuild_equals_live()

    space = services.create_address_space(ctx=ctx, tenant=tenant, name="s", type="standard",
                                          plan="standard-small")
    assert_rebuild_equals_live()

    def addr(name, type_, plan, **kw):
        return services.create_address(ctx=ctx, space=space, address=name, type=type_, plan=plan,
                                       **kw)

    steps = [
        lambda: addr("dlq", "deadletter", "standard-deadletter"),
        lambda: addr("q", "queue", "standard-small-queue", deadletter="dlq",
                     spec={"messageTtl": {"maximum": 60000}}),
        lambda: addr("big", "queue", "standard-large-queue"),
        lambda: addr("big2", "queue", "standard-large-queue"),  # Pending: Quota exceeded
        lambda: addr("t", "topic", "standard-small-topic"),
        lambda: addr("sub", "subscription", "standard-small-subscription", topic="t"),
        lambda: addr("any", "anycast", "standard-small-anycast"),
        lambda: services.update_address(ctx=ctx, space=space, name="s.q",
                                        plan="standard-medium-queue", deadletter="dlq"),
        lambda: services.update_address(ctx=ctx, space=space, name="s.q",
                                        plan="standard-medium-queue", expiry="dlq"),
        lambda: services.delete_address(ctx=ctx, space=space, name="s.big"),  # schedules big2
        lambda: services.purge_address(ctx=ctx, space=space, name="s.q"),
        lambda: services.create_messaging_user(
            ctx=ctx, space=space, username="app",
            authentication={"type": "password", "password": b64("password-1")},
            authorization=[{"addresses": ["q"], "operations": ["send"]}]),
        lambda: services.update_messaging_user(
            ctx=ctx, space=space, name="s.app",
            authentication={"type": "password", "password": b64("password-2")}),
        lambda: services.delete_messaging_user(ctx=ctx, space=space, name="s.app"),
        lambda: services.change_address_space_plan(ctx=ctx, space=space,
                                                   plan="standard-medium"),
        # Operators' plans: new credits and limits re-place the space's addresses.
        lambda: services.replace_address_plan(ctx=ctx, name="standard-medium-queue", spec={
            "addressType": "queue", "resources": {"router": 0.01, "broker": 0.9}}),
        lambda: services.replace_space_plan(ctx=ctx, name="standard-medium", spec={
            "addressSpaceType": "standard", "resourceLimits": {"router": 3.0, "broker": 1.0},
            "addressPlans": ["standard-medium-queue", "standard-large-queue",
                             "standard-deadletter", "standard-small-topic",
                             "standard-small-subscription", "standard-small-anycast"]}),
        lambda: services.create_address_plan(ctx=ctx, name="ops-queue", spec={
            "addressType": "queue", "resources": {"broker": 0.1}}),
        lambda: services.create_space_plan(ctx=ctx, name="ops-space", spec={
            "addressSpaceType": "standard", "addressPlans": ["ops-queue"]}),
        lambda: services.delete_space_plan(ctx=ctx, name="ops-space"),
        lambda: services.delete_address_plan(ctx=ctx, name="ops-queue"),
        # A PUT of a space an older MaaS stored with EnMasse's endpoints drops them.
        lambda: services.change_address_space_plan(ctx=ctx, space=legacy_space(tenant, "old"),
                                                   plan="standard-small", spec={}),
        # A close needs a live router (tests/workers/test_connections.py): its audit event is
        # appended here as close_connection appends it.
        lambda: _appended(tenant, "tenant.connection_closed", {
            "space": "s", "id": "router-7", "hostname": "10.0.0.1:5000", "container_id": "c",
            "principal": "app", "protocol": "amqp", "via": "router"}, ctx),
        lambda: services.delete_address_space(ctx=ctx, space=space),
        lambda: services.remove_address_space(uid=space.uid),
        lambda: delete_tenant(ctx=ctx, tenant=tenant),
    ]
    for step in steps:
        step()
        assert_rebuild_equals_live()

    seen = set(ConfigEvent.objects.values_list("type", flat=True))
    assert seen == set(EVENT_TYPES)


def test_members_and_quota_changed_without_their_events_are_found_and_repaired(
        tenant, admin_member, viewer):
    Membership.objects.filter(tenant=tenant, user=viewer).update(role=Role.OWNER)
    Membership.objects.filter(tenant=tenant, user=admin_member).delete()
    TenantQuota.objects.filter(tenant=tenant).update(max_addresses=1, throttled=True)

    count, diffs = rebuild(check_only=True)
    assert [d.split(":")[0] for d in diffs] == [f"tenants {tenant.uid}"]
    rebuild(check_only=False)
    roles = dict(Membership.objects.filter(tenant=tenant).values_list("user__username", "role"))
    assert roles[viewer.username] == Role.VIEWER and roles[admin_member.username] == Role.ADMIN
    quota = TenantQuota.objects.get(tenant=tenant)
    assert quota.max_addresses == 10000 and not quota.throttled
    assert_rebuild_equals_live()


def test_sequences_are_gap_free_per_stream(tenant):
    space = services.create_address_space(ctx=CTX, tenant=tenant, name="s", type="brokered",
                                          plan="brokered-single-broker")
    for i in range(5):
        services.create_address(ctx=CTX, space=space, address=f"q{i}", type="queue",
                                plan="brokered-queue")
    for stream in EventStream.objects.all():
        sequences = list(stream.events.order_by("sequence").values_list("sequence", flat=True))
        assert sequences == list(range(1, stream.last_sequence + 1))


def test_the_management_command_rebuilds_and_checks(tenant, capsys):
    space = services.create_address_space(ctx=CTX, tenant=tenant, name="s", type="brokered",
                                          plan="brokered-single-broker")
    services.create_address(ctx=CTX, space=space, address="q", type="queue",
                            plan="brokered-queue")
    before = snapshot()
    call_command("rebuild_projections")
    call_command("rebuild_projections", "--check")
    assert "0 differences" in capsys.readouterr().out
    assert snapshot() == before


def _appended(tenant, type_name, payload, ctx):
    with transaction.atomic():
        append_tenant_event(tenant, type_name, payload, ctx=ctx)
