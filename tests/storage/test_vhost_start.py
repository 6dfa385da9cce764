"""A vhost RabbitMQ has recorded but not started yet stops the apply until it runs (real broker).

RabbitMQ records a vhost, then starts it, one vhost at a time: at a few hundred vhosts a start
waited minutes, past the PUT's timeout, and a definitions import into the recorded vhost
answered success and declared no queue; and the PUT held an agent slot while it waited, so
it waits only VHOST_PUT_WAIT, whatever the client's timeout. The test holds RabbitMQ's vhost starts for a few
seconds (tests/faults.py), which is that broker's state on cue.
"""
import uuid

import pytest

from tests.conftest import wait_for
from tests.faults import hold_vhost_starts, release_vhost_starts
from workers.agents.storage.desired import BrokerQueue, VhostState
from workers.agents.storage.rabbitmq import BrokerError, BrokerReconciler, RabbitMQApi
from workers.clients.rabbitmq_api import VHOST_PUT_WAIT

from .clients import API_PASSWORD, API_URL, API_USER

# Restarts or holds a broker every test shares: run apart from the others (make test).
pytestmark = pytest.mark.serial


@pytest.fixture
def reads():
    api = RabbitMQApi(API_URL, API_USER, API_PASSWORD, timeout=30)
    yield api
    api.close()


@pytest.fixture
def vhost(reads):
    name = "maas-test-" + uuid.uuid4().hex[:10]
    yield name
    release_vhost_starts()
    wait_for(lambda: running(reads, name) is not False, timeout=60, what="the vhost started")
    BrokerReconciler(reads).teardown(name)
    reads.delete_vhost(name)


def running(api: RabbitMQApi, vhost: str) -> bool | None:
    """None: no such vhost; else whether it runs on every node."""
    info = api.get_vhost(vhost)
    if info is None:
        return None
    return all(state == "running" for state in info["cluster_state"].values())


def test_a_vhost_recorded_but_not_started_is_retried_and_nothing_is_declared_in_it(vhost, reads):
    state = VhostState(vhost=vhost, queues=[BrokerQueue(f"q{i}", "queue") for i in range(5)])
    # A patient client: the vhost PUT alone waits only VHOST_PUT_WAIT for the held start (the
    # hold ends by itself after 30 s: waiting for the client's 60 s would see the PUT succeed).
    patient = RabbitMQApi(API_URL, API_USER, API_PASSWORD, timeout=60)
    reconciler = BrokerReconciler(patient)
    hold_vhost_starts()
    try:
        first = reconciler.apply(state)
        assert first.transient and first.vhost_errors, first
        assert f"read timeout={VHOST_PUT_WAIT}" in first.vhost_errors[0]
        assert running(reads, vhost) is False  # recorded by the PUT, not started

        with pytest.raises(BrokerError) as again:
            reconciler.apply(state)
        assert again.value.transient
        assert f"vhost {vhost} is not running yet" in again.value.message
        assert reads.list_queues(vhost) == []
        assert reads.request("GET", f"/definitions/{vhost}")["queues"] == []
    finally:
        release_vhost_starts()
        patient.close()
    wait_for(lambda: running(reads, vhost), timeout=60, what="the vhost started")

    result = BrokerReconciler(reads).apply(state)
    assert result.ok and not result.transient
    assert sorted(q["name"] for q in reads.list_queues(vhost)) == [f"q{i}" for i in range(5)]
