"""Fixtures of the agent tests: one embedded router process per module, and the settings that
point the router agent at it."""
import pytest

from tests.router.conftest import ADMIN_PASSWORD, RouterProcess
from workers.agents import base


@pytest.fixture(scope="module")
def router():
    proc = RouterProcess()
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(autouse=True)
def router_settings(settings, router):
    settings.MAAS_ROUTER_MANAGEMENT_URL = f"amqp://127.0.0.1:{router.mgmt_port}"
    settings.MAAS_ROUTER_ADMIN_USER = "admin"
    settings.MAAS_ROUTER_ADMIN_PASSWORD = ADMIN_PASSWORD
    settings.MAAS_ROUTER_AMQP_PORT = router.amqp_port


def sync(space):
    """What the fan-out does after a change: every agent of the space reconciles it."""
    for kind in ("storage", "router"):
        base.run(space.uid, kind)
