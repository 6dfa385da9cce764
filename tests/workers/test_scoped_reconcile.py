"""A reconcile costs what its space holds, not what the router holds: the agent asks the
embedded router for its own entities only, READs them by name on qdrouterd (which answers a
QUERY with every space's: workers/agents/router/tables.py), and reads every router in pages."""
import uuid

import pytest

from config_service import services
from config_service.models import AddressSpace
from tests.conftest import CTX
from tests.workers.conftest import sync
from tests.workers.test_standard_space_e2e import add, phases
from workers.agents.router import agent as router_agent
from workers.agents.router import desired as rc
from workers.agents.runner import run
from workers.clients import qdr

BOTH_ROUTERS = True
FOREIGN = 300  # other spaces' entities on the router


@pytest.fixture
def crowd(mgmt):
    """Entities of other spaces, named as the agent names them."""
    names = [f"maas:crowd-{uuid.uuid4().hex[:6]}.s{i}:address:a" for i in range(FOREIGN)]
    for i, name in enumerate(names):
        mgmt.create(rc.ADDRESS, name, {"prefix": f"crowd{i}/a", "distribution": "balanced"})
    yield names
    for name in names:
        mgmt.delete(rc.ADDRESS, name)


@pytest.fixture
def space(tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"sc{uuid.uuid4().hex[:5]}",
                                      type="standard", plan="standard-medium")
    yield s
    if AddressSpace.objects.filter(uid=s.uid, terminating=False).exists():
        services.delete_address_space(ctx=CTX, space=s)
        sync(s)


def test_a_reconcile_reads_its_own_space_only(router, router_kind, mgmt, crowd, space):
    for i in range(3):
        add(space, f"a{i}", "anycast", "standard-small-anycast")
    add(space, "q", "queue", "standard-small-queue")
    sync(space)
    own = sum(len(mgmt.query(t, ["name"], name_prefix=rc.owner_prefix(space.vhost)))
              for t in router_agent.entity_types(mgmt))
    # A deletion: the full diff (a new anycast address alone would read nothing at all,
    # test_incremental_reconcile.py).
    services.delete_address(ctx=CTX, space=space, name=f"{space.name}.a0")
    before = mgmt.rows_read
    run(space.uid, "router", router_agent.RouterAgent(management=mgmt))
    read = mgmt.rows_read - before
    assert set(phases(space).values()) == {"Active"}
    if router_kind == "embedded":
        # its entities, each read once, however many the router holds
        assert 0 < read <= own
    else:  # qdrouterd, no name filter: its own by name (seen shared, by sync's own QUERY),
        # the deleted address's as touched lately, and the watch marker: none of the crowd's
        assert 0 < read <= 2 * own < FOREIGN


def test_paged_reads_see_every_entity_once(router, mgmt, crowd, space, monkeypatch):
    monkeypatch.setattr(qdr, "QUERY_PAGE", 7)
    monkeypatch.setattr(router_agent, "QUERY_PAGE", 7)
    names = [row["name"] for row in mgmt.query(rc.ADDRESS, ["name"], page=7)]
    assert len(names) == len(set(names))
    assert set(crowd) <= set(names)
    for i in range(12):
        add(space, f"p{i}", "anycast", "standard-small-anycast")
    sync(space)  # the agent reads the router 7 rows at a time
    assert set(phases(space).values()) == {"Active"}
    owned = mgmt.query(rc.ADDRESS, ["name"], name_prefix=rc.owner_prefix(space.vhost), page=7)
    assert len(owned) == 12
