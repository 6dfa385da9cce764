"""An agent run's hand-written statements (workers/agents/statements.py) read what the ORM
queries they replace read: the same instances, fields decoded (JSON, UUIDs, times), related
rows cached, nothing of another space or tenant, and nothing for a row that is missing."""
import uuid

from django.db import connection
from django.db.models import Exists, OuterRef, Subquery
from django.test.utils import CaptureQueriesContext

from config_service import services
from config_service.models import Address, AddressSpace, AgentState, MessagingUser
from eventlog.models import ConfigEvent
from tenants.models import AddressSpacePlan, Tenant, TenantQuota
from tests.config_service.test_statements import fields, no_query
from tests.conftest import CTX, b64
from workers.agents import runner, statements

RULES = [{"addresses": ["*"], "operations": ["send", "recv"]}]


def standard_space(tenant, name="st"):
    space = services.create_address_space(ctx=CTX, tenant=tenant, name=name, type="standard",
                                          plan="standard-medium")
    for address, type_, plan in (("a1", "anycast", "standard-small-anycast"),
                                 ("q1", "queue", "standard-small-queue"),
                                 ("m1", "multicast", "standard-small-multicast")):
        services.create_address(ctx=CTX, space=space, address=address, type=type_, plan=plan)
    return AddressSpace.objects.get(pk=space.pk)


def test_a_run_reads_the_space_its_tenant_the_state_and_the_events_not_applied(tenant):
    space = standard_space(tenant)
    orm = AddressSpace.objects.select_related("tenant").get(uid=space.uid)

    read, state, events = statements.run_start(space.uid, "router", True, 101)
    assert fields(read) == fields(orm)
    assert isinstance(read.uid, uuid.UUID) and isinstance(read.plan_status, dict)
    assert read.created_at.tzinfo is not None
    assert fields(no_query(lambda: read.tenant)) == fields(orm.tenant)
    assert state is None  # the agent never ran: its events are those after sequence 0
    assert events == runner._events_after(space.uid, 0, 100) and len(events) == 4
    assert events[1][0] == "address.created" and events[1][1]["address"] == "a1"

    mine = AgentState.objects.create(space_uid=space.uid, kind="router", applied_sequence=2,
                                     address_errors={"a1": {"message": "x", "permanent": True}})
    AgentState.objects.create(space_uid=space.uid, kind="storage", applied_sequence=4)
    _, state, events = statements.run_start(space.uid, "router", True, 101)
    assert fields(state) == fields(AgentState.objects.get(pk=mine.pk))
    assert state.address_errors == {"a1": {"message": "x", "permanent": True}}
    assert events == runner._events_after(space.uid, 2, 100) and len(events) == 2

    _, _, none = statements.run_start(space.uid, "storage", True, 101)
    assert none == []  # every event applied: none, not unread
    _, _, unread = statements.run_start(space.uid, "router", False, 101)
    assert unread is None
    _, _, capped = statements.run_start(space.uid, "router", True, 1)
    assert len(capped) == 1  # the limit is the caller's, which asks for one past its own
    assert statements.run_start(uuid.uuid4(), "router", True, 101) is None


def test_the_run_uses_what_it_read_and_creates_a_missing_state(tenant):
    space = standard_space(tenant, "runs")
    seen = {}

    class Looking(runner.Agent):
        kind = "router"

        def reconcile(self, space):
            seen["events"] = runner.pending_events(space.uid, self.kind)
            seen["state"] = runner.agent_state(space.uid, self.kind)
            return runner.Report()

    with CaptureQueriesContext(connection) as ctx:
        assert runner.run(space.uid, "router", Looking()) == 4
    assert seen["events"] == runner._events_after(space.uid, 0, 100)
    assert seen["state"].space_uid == space.uid and seen["state"].pk is not None
    assert not any(q["sql"].lstrip().startswith('SELECT "config_service_configevent"')
                   for q in ctx.captured_queries)  # the events came with the space
    assert AgentState.objects.get(space_uid=space.uid, kind="router").applied_sequence == 4
    runner.run(space.uid, "router", Looking(), check=True)
    assert seen["events"] is None  # a drift check takes no shortcut


def test_the_named_addresses_are_the_spaces_scheduled_ones(tenant, outsider):
    space = standard_space(tenant, "named")
    other = standard_space(Tenant.objects.create(slug="other-tenant", name="Other"), "named")
    Address.objects.filter(space=space, address="m1").update(scheduled=False)
    names = [f"named.{a}" for a in ("a1", "q1", "m1", "nope")]

    found = statements.addresses_named(space, names)
    orm = Address.objects.filter(space=space, name__in=names, scheduled=True)
    assert sorted(map(fields, found), key=str) == sorted(map(fields, orm), key=str)
    assert {a.address for a in found} == {"a1", "q1"}
    assert all(no_query(lambda a=a: a.space) is space for a in found)
    assert isinstance(found[0].plan_status, dict) and isinstance(found[0].placement, list)
    assert {a.space_id for a in statements.addresses_named(other, names)} == {other.pk}
    assert statements.addresses_named(space, []) == []


def test_the_users_are_the_spaces_by_username(tenant):
    space = standard_space(tenant, "users")
    other = standard_space(tenant, "others")
    for username in ("zed", "app"):
        services.create_messaging_user(ctx=CTX, space=space, username=username,
                                       authentication={"password": b64("secret-pw-1")},
                                       authorization=RULES)
    services.create_messaging_user(ctx=CTX, space=other, username="elsewhere",
                                   authentication={"password": b64("secret-pw-1")},
                                   authorization=RULES)

    users = statements.messaging_users(space)
    orm = MessagingUser.objects.filter(space=space).order_by("username")
    assert list(map(fields, users)) == list(map(fields, orm))
    assert [u.username for u in users] == ["app", "zed"]
    assert users[0].authorization == RULES
    assert no_query(lambda: users[0].space) is space


def test_the_throttle_and_the_plans_router_policy(tenant):
    space = standard_space(tenant, "policy")

    def orm(space):
        row = (Tenant.objects.filter(pk=space.tenant_id).annotate(
            throttled=Exists(TenantQuota.objects.filter(tenant_id=OuterRef("pk"),
                                                        throttled=True)),
            plan_policy=Subquery(AddressSpacePlan.objects.filter(name=space.plan)
                                 .values("router_policy")[:1]),
        ).values_list("throttled", "plan_policy").first())
        return row if row is not None else (False, None)

    assert statements.throttle_and_plan_policy(space) == orm(space)
    AddressSpacePlan.objects.filter(name=space.plan).update(router_policy={"maxConnections": 7})
    TenantQuota.objects.filter(tenant=tenant).update(throttled=True)
    assert statements.throttle_and_plan_policy(space) == orm(space) == (
        True, {"maxConnections": 7})
    space.plan = "no-such-plan"
    assert statements.throttle_and_plan_policy(space) == orm(space) == (True, None)
    space.tenant_id = -1
    assert statements.throttle_and_plan_policy(space) == orm(space) == (False, None)
    assert ConfigEvent.objects.filter(stream_id=space.uid).count() == 4  # nothing written
