"""A space whose broker teardown fails stays Terminating, with the reason in its status, and is
retried until its vhost is gone; the worker's log line of the failure carries vhost and error.

The failure is injected by an HTTP relay in front of the real RabbitMQ management API that
answers DELETE requests with 503 for a while (tests/faults.py); everything else is real: the
database, Redis, a Celery worker process and RabbitMQ."""
import json

import pytest
from django.conf import settings

from config_service import services
from config_service.models import AddressSpace, AgentState
from tests.conftest import CTX, Worker, wait_for
from tests.faults import HttpFaultProxy
from tests.workers import rabbit

pytestmark = pytest.mark.slow


@pytest.fixture
def proxy():
    relay = HttpFaultProxy(settings.RABBITMQ_API_URL.removesuffix("/api"))
    yield relay
    relay.close()


@pytest.fixture
def worker_log(tmp_path):
    return tmp_path / "worker.log"


@pytest.fixture
def worker(transactional_db, redis_server, proxy, worker_log):
    w = Worker(settings.DATABASES["default"]["NAME"], log_path=worker_log,
               RABBITMQ_API_URL=proxy.url + "/api")
    w.start()
    yield w
    w.stop()


def _log_lines(path) -> list[dict]:
    lines = []
    for raw in path.read_text().splitlines():
        try:
            lines.append(json.loads(raw))
        except ValueError:
            continue  # Celery's start-up banner
    return lines


def test_a_failed_teardown_keeps_the_space_terminating_and_is_retried_until_the_vhost_is_gone(
        tenant, worker, proxy, worker_log, api):
    space = services.create_address_space(ctx=CTX, tenant=tenant, name="doomed",
                                          type="brokered", plan="brokered-single-broker")
    for name in ("a", "b", "c"):
        services.create_address(ctx=CTX, space=space, address=name, type="queue",
                                plan="brokered-queue")
    wait_for(lambda: rabbit.queue_names(space.vhost) >= {"a", "b", "c"}, 60,
             what="the queues on RabbitMQ")

    proxy.fail_methods = {"DELETE"}
    services.delete_address_space(ctx=CTX, space=space)
    wait_for(lambda: AgentState.objects.filter(space_uid=space.uid, kind="storage",
                                               space_error__contains="Cleaning up failed").exists(),
             60, what="the teardown failure recorded")

    assert AddressSpace.objects.filter(uid=space.uid, terminating=True).exists()
    assert rabbit.vhost_exists(space.vhost)
    body = api.get(f"/api/v1/tenants/{tenant.slug}/addressspaces/doomed/").json()
    assert body["status"]["phase"] == "Terminating"
    assert any("Cleaning up failed" in m and "503" in m for m in body["status"]["messages"])
    failed = [line for line in _log_lines(worker_log) if line["event"] == "agent.teardown_failed"]
    assert failed and failed[0]["vhost"] == space.vhost and "503" in failed[0]["error"]

    proxy.fail_methods = set()
    wait_for(lambda: not AddressSpace.objects.filter(uid=space.uid).exists(), 90,
             what="the space removed after a successful retry")
    assert not rabbit.vhost_exists(space.vhost)
