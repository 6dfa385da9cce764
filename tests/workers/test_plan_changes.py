"""An operator's plan change reaches the broker: the storage agent applies the re-placed
addresses (new credits, new TTL) and drops the queue of one that went Pending."""
import uuid
from urllib.parse import quote

import pytest
from django.conf import settings

from config_service import services
from config_service.models import AddressSpace
from config_service.status import address_status, agent_states
from tests.conftest import CTX
from tests.storage.clients import queue_policy
from tests.workers import rabbit
from workers.agents import runner


@pytest.fixture
def space(tenant):
    services.create_address_plan(ctx=CTX, name="ops-queue", spec={
        "addressType": "queue", "resources": {"router": 0.001, "broker": 0.4}})
    services.create_space_plan(ctx=CTX, name="ops-small", spec={
        "addressSpaceType": "standard", "addressPlans": ["ops-queue"],
        "resourceLimits": {"router": 1.0, "broker": 1.0, "aggregate": 2.0}})
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"s{uuid.uuid4().hex[:6]}",
                                      type="standard", plan="ops-small")
    for name in ("a", "b"):
        services.create_address(ctx=CTX, space=s, address=name, type="queue", plan="ops-queue")
    runner.run(s.uid, "storage")
    yield s
    services.delete_address_space(ctx=CTX, space=s)
    runner.run(s.uid, "storage")


def policy(space, queue: str) -> dict:
    answer = rabbit.api(f"/policies/{quote(space.vhost, safe='')}")
    found = queue_policy(answer.json(), queue) if answer.status_code == 200 else None
    return found["definition"] if found else {}


def phase(space, name: str) -> tuple[str, list[str]]:
    space = AddressSpace.objects.get(uid=space.uid)
    status = address_status(space, space.addresses.get(name=f"{space.name}.{name}"),
                            agent_states([space.uid]).get(space.uid, {}))
    return status.phase, status.messages


def test_new_credits_reach_the_broker_and_an_address_over_the_plan_loses_its_queue(space):
    size = settings.MAAS_BROKER_GLOBAL_MAX_SIZE
    assert {"a", "b"} <= rabbit.queue_names(space.vhost)
    assert policy(space, "a")["max-length-bytes"] == int(0.4 * size)

    services.replace_address_plan(ctx=CTX, name="ops-queue", spec={
        "addressType": "queue", "resources": {"router": 0.001, "broker": 0.6},
        "messageTtl": {"maximum": 60000}})
    runner.run(space.uid, "storage")

    assert policy(space, "a")["max-length-bytes"] == int(0.6 * size)
    assert policy(space, "a")["message-ttl"] == 60000
    assert "b" not in rabbit.queue_names(space.vhost)
    assert phase(space, "b") == ("Pending", ["Quota exceeded"])
