"""The router agent keeps its management connection between reconciles (opening one, SASL
relayed to the auth service, costs about as much as reconciling a small change), and a kept
connection the router dropped is replaced at once, within the same reconcile."""
import uuid

import pytest

from config_service import services
from config_service.models import AddressSpace
from tests.conftest import CTX
from tests.router.conftest import ADMIN_PASSWORD
from tests.workers.conftest import sync
from tests.workers.test_standard_space_e2e import add, phases
from workers.agents.router import agent as router_agent
from workers.agents.runner import run
from workers.clients.qdr import Management

BOTH_ROUTERS = True
CONNECTION = "org.apache.qpid.dispatch.connection"


@pytest.fixture(autouse=True)
def empty_pool():
    """Each test starts and ends without kept connections (they would outlive its router)."""
    router_agent.close_pooled()
    yield
    router_agent.close_pooled()


@pytest.fixture
def space(tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"cp{uuid.uuid4().hex[:5]}",
                                      type="standard", plan="standard-medium")
    yield s
    if AddressSpace.objects.filter(uid=s.uid, terminating=False).exists():
        services.delete_address_space(ctx=CTX, space=s)
        sync(s)


def admin_connections(router) -> int:
    """Management connections open on the router as the admin, apart from this count's own."""
    probe = Management(f"amqp://127.0.0.1:{router.mgmt_port}", "admin", ADMIN_PASSWORD)
    try:
        rows = probe.query(CONNECTION, ["user", "role"])
        return sum(1 for row in rows if str(row.get("user", "")).startswith("admin")) - 1
    finally:
        probe.close()


def test_reconciles_share_one_management_connection(router, space):
    for i in range(3):
        add(space, f"a{i}", "anycast", "standard-small-anycast")
        run(space.uid, "router")
    assert phases(space) == {f"a{i}": "Active" for i in range(3)}
    assert admin_connections(router) == 1  # the kept one; without the pool: 0 (each closed)


def test_a_connection_the_router_dropped_is_replaced_in_the_same_reconcile(router, space):
    add(space, "before", "anycast", "standard-small-anycast")
    run(space.uid, "router")
    assert router_agent.pooled_count() == 1
    router.restart()  # the kept connection is gone with the old process

    add(space, "after", "anycast", "standard-small-anycast")
    run(space.uid, "router")  # no TransientError: the reconcile ran again on a new connection

    assert phases(space) == {"before": "Active", "after": "Active"}
    assert router_agent.pooled_count() == 1
