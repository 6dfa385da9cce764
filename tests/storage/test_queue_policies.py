"""Queues with the same settings share one policy (workers/agents/storage/rabbitmq_objects.py).

RabbitMQ 3.10 re-matches every queue and exchange of the broker, with their tables locked, at
each policy it sets or deletes: 35-116 ms a policy with 13,000 queues and 25,000 exchanges,
so a policy per queue made filling a standard space (20 queues) cost seconds of the broker's
one metadata writer. The grouping is checked as a pure function and against the real broker,
whose own matching must give each queue its settings."""
import re
import uuid

import pytest

from tests.conftest import BROKER_STATS_LAG, wait_for
from tests.storage.clients import queue_policy
from workers.agents.storage.desired import BrokerQueue, VhostState
from workers.agents.storage.rabbitmq import (
    POLICY_PREFIX,
    BrokerReconciler,
    desired_objects,
    policy_of,
    queue_policies,
)
from workers.agents.storage.rabbitmq_objects import POLICY_PATTERN_BYTES, names_pattern

SHORT = {"message-ttl": 60_000}
CAPPED = {"max-length-bytes": 1_000, "overflow": "reject-publish"}


def test_one_policy_per_setting_whose_pattern_names_exactly_its_queues():
    settings = {f"q{i}": SHORT for i in range(20)} | {"a.b": CAPPED, "a-b": CAPPED}
    policies = queue_policies(settings)
    assert len(policies) == 2
    by_definition = {str(d): queues for d, queues in policies.values()}
    assert by_definition[str(SHORT)] == sorted(f"q{i}" for i in range(20))
    assert by_definition[str(CAPPED)] == ["a-b", "a.b"]
    capped = next(name for name, (d, _) in policies.items() if d == CAPPED)
    pattern = names_pattern(policies[capped][1])
    assert re.search(pattern, "a.b") and re.search(pattern, "a-b")
    assert not re.search(pattern, "aXb") and not re.search(pattern, "a.bc")  # escaped, anchored
    assert not re.search(pattern, "q1")


def test_a_new_queue_joins_its_settings_policy_under_the_same_name():
    before = queue_policies({f"q{i}": SHORT for i in range(5)})
    after = queue_policies({f"q{i}": SHORT for i in range(6)})
    assert list(before) == list(after)
    assert after[next(iter(after))][1] == [f"q{i}" for i in range(6)]


def test_many_queues_of_one_setting_are_split_under_the_pattern_size():
    names = [f"orders-{i:05d}-{'x' * 20}" for i in range(3_000)]
    policies = queue_policies(dict.fromkeys(names, SHORT))
    assert len(policies) > 1
    served = [q for _, queues in policies.values() for q in queues]
    assert sorted(served) == sorted(names)  # each queue in exactly one
    assert max(len(names_pattern(qs)) for _, qs in policies.values()) <= POLICY_PATTERN_BYTES


@pytest.fixture
def vhost(admin):
    name = "maas-test-policies-" + uuid.uuid4().hex[:8]
    yield name
    BrokerReconciler(admin).teardown(name)


def effective(admin, vhost: str, queue: str) -> tuple[str | None, dict | None]:
    row = admin.request("GET", f"/queues/{vhost}/{queue}")
    return row.get("policy"), row.get("effective_policy_definition")


def test_the_broker_gives_each_queue_its_shared_policy(admin, vhost):
    queues = ([BrokerQueue(f"q{i}", "queue", ttl_ms=60_000) for i in range(12)]
              + [BrokerQueue(f"c{i}", "queue", max_length_bytes=1_000) for i in range(3)]
              + [BrokerQueue("plain", "deadletter")])
    state = VhostState(vhost, queues=queues)
    result = BrokerReconciler(admin).apply(state)
    assert result.ok, result
    ours = [p for p in admin.list_policies(vhost) if p["name"].startswith(POLICY_PREFIX)]
    assert len(ours) == 2  # not 15
    desired = desired_objects(state)
    for queue, definition in [("q0", SHORT), ("q11", SHORT), ("c2", CAPPED)]:
        # RabbitMQ's own matching, as its queue reports it: the queue's statistics, so up to
        # BROKER_STATS_LAG late (services.sh's copy interval); 15 s failed CI at 30 s copies
        wanted = (policy_of(desired, queue), definition)
        wait_for(lambda q=queue, w=wanted: effective(admin, vhost, q) == w,
                 timeout=BROKER_STATS_LAG + 10,
                 what=f"{queue}'s policy")
    assert effective(admin, vhost, "plain")[0] is None


def test_policies_of_a_queue_each_are_replaced_by_the_shared_one(admin, vhost):
    """A broker set up by the previous release has a policy per queue: the next apply leaves
    only the shared one, and the queues keep their settings meanwhile."""
    state = VhostState(vhost, queues=[BrokerQueue(f"q{i}", "queue", ttl_ms=60_000)
                                      for i in range(4)])
    reconciler = BrokerReconciler(admin)
    assert reconciler.apply(state).ok
    shared = policy_of(desired_objects(state), "q0")
    admin.delete_policy(vhost, shared)
    for i in range(4):  # as the previous release named and shaped them
        admin.put_policy(vhost, f"{POLICY_PREFIX}q{i}", f"^q{i}$", SHORT, 1000, "queues")

    result = reconciler.apply(state)
    assert result.ok and set(result.verified) == {f"q{i}" for i in range(4)}
    names = {p["name"] for p in admin.list_policies(vhost)}
    assert names == {shared}
    assert sorted(result.deleted) == sorted(f"policy:{POLICY_PREFIX}q{i}" for i in range(4))
    assert queue_policy(admin.list_policies(vhost), "q3")["definition"] == SHORT
