"""Fixtures of the agent tests: one router process per module, and the settings that point the
router agent at it. Modules that set `BOTH_ROUTERS = True` run against the embedded router and
against qdrouterd 1.19 (where `QDROUTERD` names a build; skipped with the reason elsewhere), those
that set `ONLY_QDROUTERD = True` against qdrouterd alone."""
import pytest

from dataplane import qdrouterd
from tests.qdrouterd import SKIP_REASON, AuthService, QdrouterdProcess, VhostRelay
from tests.router.conftest import ADMIN_PASSWORD, RouterProcess
from workers.agents import runner
from workers.agents.router.agent import close_pooled
from workers.clients.qdr import Management

# qdrouterd's half runs in make test, not in make test-quick (the inner loop).
ROUTER_KINDS = ["embedded", pytest.param("qdrouterd", marks=pytest.mark.slow)]


def pytest_generate_tests(metafunc):
    if "router_kind" in metafunc.fixturenames:
        both = getattr(metafunc.module, "BOTH_ROUTERS", False)
        # A module of what only qdrouterd carries (spec.connectors) sets ONLY_QDROUTERD.
        kinds = (ROUTER_KINDS[1:] if getattr(metafunc.module, "ONLY_QDROUTERD", False)
                 else ROUTER_KINDS if both else ["embedded"])
        metafunc.parametrize("router_kind", kinds, scope="module")


@pytest.fixture(scope="module")
def router_kind():
    """The embedded router, unless pytest_generate_tests chose (modules with BOTH_ROUTERS)."""
    return "embedded"


def pytest_collection_modifyitems(items):
    # Both routers relay SASL to the auth service, which reads messaging users from its own
    # database connection: the tests through either router commit their data.
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("router_kind") in ("embedded",
                                                                            "qdrouterd"):
            item.add_marker(pytest.mark.django_db(transaction=True))


@pytest.fixture(scope="module")
def router(router_kind):
    if router_kind == "embedded":
        auth = AuthService()  # the real, database-backed one, as for qdrouterd
        proc = RouterProcess(auth_port=auth.port)
        proc.kind, proc.relay = "embedded", None
        proc.start()
        yield proc
        close_pooled()  # the agent's kept management connections go with their router
        proc.stop()
        auth.stop()
        return
    if qdrouterd.binary() is None:
        pytest.skip(SKIP_REASON)
    auth, relay = AuthService(), VhostRelay()
    proc = QdrouterdProcess(auth.port)
    proc.relay = relay
    proc.start()
    yield proc
    close_pooled()
    proc.stop()
    relay.stop()
    auth.stop()


@pytest.fixture(autouse=True)
def router_settings(settings, router):
    settings.MAAS_ROUTER_MANAGEMENT_URL = f"amqp://127.0.0.1:{router.mgmt_port}"
    settings.MAAS_ROUTER_ADMIN_USER = "admin"
    settings.MAAS_ROUTER_ADMIN_PASSWORD = ADMIN_PASSWORD
    settings.MAAS_ROUTER_AMQP_PORT = router.amqp_port
    if router.relay is not None:
        settings.MAAS_VHOST_RELAY_PORT = router.relay.port


@pytest.fixture
def mgmt(router):
    """A management connection to the module's router, as the router admin."""
    client = Management(f"amqp://127.0.0.1:{router.mgmt_port}", "admin", ADMIN_PASSWORD)
    yield client
    client.close()


def sync(space):
    """What the fan-out does after a change: every agent of the space reconciles it."""
    for kind in ("storage", "router"):
        runner.run(space.uid, kind)


@pytest.fixture(scope="module")
def spark():
    """One local Spark session for a module's usage jobs."""
    from spark.session import get_session

    return get_session("maas-tests")


@pytest.fixture
def store(settings, tmp_path):
    """A usage store of the test's own."""
    settings.MAAS_USAGE_STORE = str(tmp_path / "usage")
    return settings.MAAS_USAGE_STORE


@pytest.fixture(scope="module")
def second_broker():
    """Node maas1 of the broker pool (AMQP 5681, management 15681), a real RabbitMQ, running
    for the module and stopped after it (tests/workers/broker_pool.py)."""
    from tests.workers import broker_pool

    node = broker_pool.start_second()
    yield node
    broker_pool.stop_second()


@pytest.fixture
def pool(settings, second_broker):
    """MAAS_RABBITMQ_NODES=2: (the shared broker, maas1)."""
    from workers import endpoints

    settings.MAAS_RABBITMQ_NODES = 2
    return endpoints.broker_pool()

