"""A new anycast or multicast address in a clean space is applied reading nothing of the
router when the space's vhost policy is what its last clean run applied (applied.py), else
reading that policy alone (its entities are created and the answers confirm them); anything
else, or any doubt, takes the full diff, which every resync and drift check runs anyway."""
import uuid

import pytest

from config_service import services
from config_service.models import AddressSpace, AgentState
from tenants.models import TenantQuota
from tests.conftest import CTX
from tests.workers.conftest import sync
from tests.workers.test_standard_space_e2e import add, phases, user
from workers.agents.router import applied
from workers.agents.router import desired as rc
from workers.agents.router.agent import RouterAgent, features
from workers.agents.runner import run

BOTH_ROUTERS = True


@pytest.fixture
def space(tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"in{uuid.uuid4().hex[:5]}",
                                      type="standard", plan="standard-medium")
    for i in range(5):
        add(s, f"a{i}", "anycast", "standard-small-anycast")
    sync(s)
    yield s
    if AddressSpace.objects.filter(uid=s.uid, terminating=False).exists():
        services.delete_address_space(ctx=CTX, space=s)
        sync(s)


def reconcile_reading(mgmt, space) -> int:
    """Entities the router agent read to reconcile the space (on a connection that has read
    qdrouterd's listeners already: that happens once per connection)."""
    features(mgmt, space.vhost)
    before = mgmt.rows_read
    run(space.uid, "router", RouterAgent(management=mgmt))
    return mgmt.rows_read - before


def owned(mgmt, space) -> set:
    prefix = rc.owner_prefix(space.vhost)
    return {row["name"] for row in mgmt.query(rc.ADDRESS, ["name"], name_prefix=prefix)}


def test_new_anycast_and_multicast_addresses_are_applied_without_reading(mgmt, space):
    add(space, "new-any", "anycast", "standard-small-anycast")
    add(space, "new-multi", "multicast", "standard-small-multicast")

    # The fixture's full diff recorded the policy, on another connection: this one READs it
    # once by name (a router restarted since would have ended that other connection)...
    assert reconcile_reading(mgmt, space) == 1

    assert phases(space)["new-any"] == phases(space)["new-multi"] == "Active"
    prefix = rc.owner_prefix(space.vhost)
    assert {f"{prefix}address:new-any", f"{prefix}address:new-multi"} <= owned(mgmt, space)

    # ...and then reads nothing for the next ones, while the record in Redis agrees.
    add(space, "next", "anycast", "standard-small-anycast")
    assert reconcile_reading(mgmt, space) == 0
    assert phases(space)["next"] == "Active"

    # Without the record (Redis emptied, an hour gone) the policy is READ again, and the
    # record is made anew from what was read.
    applied.forget(mgmt, prefix)
    add(space, "unrecorded", "anycast", "standard-small-anycast")
    assert reconcile_reading(mgmt, space) == 1
    assert phases(space)["unrecorded"] == "Active"
    add(space, "recorded-again", "anycast", "standard-small-anycast")
    assert reconcile_reading(mgmt, space) == 0


def test_a_run_reads_the_agent_state_and_the_pending_events_once(mgmt, space):
    """The runner reads the space, the state and the events after it under its lock, in one
    statement, and hands them to the agent: each was read twice a run before (a round trip
    each, of 21 an anycast create cost its two agents), then once each."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from workers.agents.storage.agent import StorageController

    add(space, "once", "anycast", "standard-small-anycast")
    for kind, agent in (("storage", StorageController()), ("router", RouterAgent(management=mgmt))):
        with CaptureQueriesContext(connection) as queries:
            run(space.uid, kind, agent)
        sql = [q["sql"] for q in queries.captured_queries]
        # The lock, the space with the state and the events (workers/agents/statements.py),
        # (the router: the new addresses, the users, its credential on the broker, the
        # throttle with the plan's policy,) the record and the unlock.
        assert len(sql) == {"storage": 4, "router": 8}[kind], "\n".join(sql)
        assert sum('"config_service_agentstate"' in s and "FOR UPDATE" not in s
                   for s in sql) == 1, kind
        assert sum('FROM "config_service_configevent"' in s for s in sql) == 1, kind
    assert phases(space)["once"] == "Active"


def test_a_queue_a_deletion_or_a_router_restart_takes_the_full_diff(mgmt, space, router):
    add(space, "q", "queue", "standard-small-queue")
    sync(space)  # the storage controller first: the queue's autoLinks need its broker queue
    assert phases(space)["q"] == "Active"
    services.delete_address(ctx=CTX, space=space, name=f"{space.name}.a0")
    assert reconcile_reading(mgmt, space) > 0
    AgentState.objects.filter(space_uid=space.uid, kind="router").update(
        invalidated="router restarted empty")  # what the router watch records
    add(space, "after-restart", "anycast", "standard-small-anycast")
    assert reconcile_reading(mgmt, space) > 0
    assert phases(space)["after-restart"] == "Active"
    # That full diff recorded the policy, the broker connector of the queue's space with it.
    add(space, "after-that", "anycast", "standard-small-anycast")
    assert reconcile_reading(mgmt, space) == 0
    assert phases(space)["after-that"] == "Active"


def test_a_throttle_while_creates_are_pending_still_reaches_the_policy(mgmt, space):
    """A tenant throttled (a wake-up, no event of the space) while a create is pending: the
    short path sees the vhost policy differ and takes the full diff, which applies both."""
    user(space, "app", [{"addresses": ["*"], "operations": ["send", "recv"]}])
    sync(space)
    add(space, "pending", "anycast", "standard-small-anycast")
    TenantQuota.objects.filter(tenant=space.tenant).update(throttled=True)

    assert reconcile_reading(mgmt, space) > 1

    vhost = mgmt.read(rc.VHOST, f"{rc.owner_prefix(space.vhost)}vhost")
    assert {g["maxSenders"] for g in vhost["groups"].values()} == {0}
    assert phases(space)["pending"] == "Active"


def test_an_entity_the_router_already_holds_falls_back_to_the_full_diff(mgmt, space):
    """Drift the agent could not know of: its CREATE is refused (name taken), so it reads
    the router and repairs what differs."""
    prefix = rc.owner_prefix(space.vhost)
    mgmt.create(rc.ADDRESS, f"{prefix}address:taken",
                {"prefix": f"{space.vhost}/wrong", "distribution": "multicast"})
    add(space, "taken", "anycast", "standard-small-anycast")

    assert reconcile_reading(mgmt, space) > 0

    assert phases(space)["taken"] == "Active"
    row = mgmt.read(rc.ADDRESS, f"{prefix}address:taken")
    assert (row["prefix"], row["distribution"]) == (f"{space.vhost}/taken", "balanced")
