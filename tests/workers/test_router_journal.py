"""An embedded router with its state directory (as `make run` starts it) restarts with its
configuration: its clients send again as soon as it listens, before any watch tick, the watch
restores nothing and no space leaves Active; a router whose journal is lost is restored by the
watch as before. Real embedded router, database-backed auth service, RabbitMQ and agents."""
import pytest

from config_service import services
from config_service.models import RouterIncarnation
from dataplane.router.config_journal import FILE_NAME
from tests.conftest import CTX
from tests.qdrouterd import AuthService
from tests.router.conftest import RouterProcess
from tests.workers.conftest import sync
from tests.workers.test_router_restart import (  # noqa: F401 - spaces: the fixture
    active,
    phases,
    receive_one,
    round_trip,
    send_acknowledged,
    spaces,
    url,
)
from workers.agents.router import watch as router_watch
from workers.agents.router.agent import close_pooled


@pytest.fixture(scope="module")
def router(tmp_path_factory):
    auth = AuthService()
    state = tmp_path_factory.mktemp("router-state")
    proc = RouterProcess(["--state-dir", str(state)], auth_port=auth.port)
    proc.kind, proc.relay, proc.state_dir = "embedded", None, state
    proc.start()
    yield proc
    close_pooled()
    proc.stop()
    auth.stop()


def kill_and_start(router) -> None:
    router.proc.kill()
    router.proc.wait()
    router.proc = None
    close_pooled()
    router.start()


def test_a_killed_router_serves_its_clients_at_once_and_the_watch_restores_nothing(
        router, spaces):  # noqa: F811
    space = spaces[0]
    router_watch.tick(url())  # the watch knows this run of the router
    restarts = RouterIncarnation.objects.get().restarts
    services.create_address(ctx=CTX, space=space, address="late", type="anycast",
                            plan="standard-small-anycast")
    sync(space)  # applied, confirmed by the router: then killed at once
    send_acknowledged(router, space, "orders", "before the kill")
    kill_and_start(router)

    assert round_trip(router, space, "late", "at once") == "at once"  # before any tick
    assert receive_one(router, space, "orders") == "before the kill"
    assert round_trip(router, space, "orders", "stored") == "stored"  # autoLinks re-attached
    result = router_watch.tick(url())
    assert (result.reachable, result.restarted, result.invalidated, result.restored) == (
        True, False, 0, 0)
    assert all(active(s) for s in spaces[1:])
    assert phases(space) == {"space": ("Active", ()), "rpc": "Active", "orders": "Active",
                             "late": "Active"}
    assert RouterIncarnation.objects.get().restarts == restarts


def test_a_router_that_lost_its_journal_is_restored_by_the_watch(router, spaces):  # noqa: F811
    router_watch.tick(url())
    router.stop()
    (router.state_dir / FILE_NAME).unlink()
    router.start()
    result = router_watch.tick(url())
    assert (result.restarted, result.invalidated, result.restored) == (True, 3, 3)
    assert phases(spaces[1])["space"] == ("Active", ())
    assert round_trip(router, spaces[1], "rpc", "restored") == "restored"
