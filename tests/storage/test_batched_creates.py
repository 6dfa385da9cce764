"""Creates in one definitions import, against the real RabbitMQ: a space's many new objects
cost one call, not one each, and end up exactly as the one-call-each path makes them; an
import the broker refuses is made again object by object, so one bad object fails only its
own address.
"""
import uuid

import pytest

from workers.agents.storage import rabbitmq_reconciler
from workers.agents.storage.desired import BrokerQueue, BrokerTopic, BrokerUser, VhostState
from workers.agents.storage.rabbitmq import (
    BrokerReconciler,
    RabbitMQApi,
    broker_username,
    desired_objects,
    hash_password,
    policy_of,
)
from workers.agents.storage.rabbitmq_objects import INCARNATION_ARG

from .clients import API_PASSWORD, API_URL, API_USER

HASH = hash_password("s3cret-pw")


class CallRecordingApi(RabbitMQApi):
    """The real client, keeping (method, path) of every call (each still goes to RabbitMQ)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, str]] = []

    def request(self, method, path, body=None, params=None, missing_ok=False, timeout=None):
        self.calls.append((method, path))
        return super().request(method, path, body, params, missing_ok, timeout)

    def writes(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p in self.calls if m != "GET"]


@pytest.fixture
def api():
    client = CallRecordingApi(API_URL, API_USER, API_PASSWORD, timeout=10)
    yield client
    client.close()


@pytest.fixture
def vhosts(api):
    made: list[str] = []

    def new() -> str:
        made.append("maas-test-" + uuid.uuid4().hex[:10])
        return made[-1]

    yield new
    for vhost in made:
        BrokerReconciler(api).teardown(vhost)
        api.delete_vhost(vhost)


def standard_space(vhost: str, queues: int = 10, topics: int = 5,
                   bad_queue: str | None = None) -> VhostState:
    """A standard space's broker side: queues with a dead-letter queue and limits, topics
    with a subscription each, one user."""
    state = VhostState(
        vhost=vhost,
        queues=[BrokerQueue("dlq", "deadletter")] + [
            BrokerQueue(f"q{i}", "queue", deadletter="dlq", ttl_ms=60_000,
                        max_length_bytes=-5 if f"q{i}" == bad_queue else 1_000_000)
            for i in range(queues)
        ] + [BrokerQueue(f"t{i}::s", "subscription", topic=f"t{i}") for i in range(topics)],
        topics=[BrokerTopic(f"t{i}") for i in range(topics)],
        users=[BrokerUser(broker_username(vhost, "app"), HASH, send=("*",), recv=("*",))],
        max_connections=20, queue_exchanges=False,
    )
    return state


def addresses(state: VhostState) -> set[str]:
    return {q.name for q in state.queues} | {t.name for t in state.topics}


def objects(api: RabbitMQApi, vhost: str) -> dict:
    """What the vhost holds, without what differs by vhost and time (creation stamps)."""
    def args(row):
        return {k: v for k, v in (row.get("arguments") or {}).items() if k != INCARNATION_ARG}
    return {
        "queues": sorted((q["name"], q.get("type"), repr(sorted(args(q).items())))
                         for q in api.list_queues(vhost)),
        "exchanges": sorted((x["name"], x["type"], x["internal"], repr(sorted(args(x).items())))
                            for x in api.list_exchanges(vhost)),
        "bindings": sorted((b["source"], b["destination"], b["destination_type"],
                            b["routing_key"], repr(sorted(args(b).items())))
                           for b in api.list_bindings(vhost)),
        "policies": sorted((p["name"], p["pattern"], repr(sorted(p["definition"].items())),
                            p["priority"], p["apply-to"]) for p in api.list_policies(vhost)),
    }


def test_a_new_space_is_created_in_one_import_as_the_one_call_each_path_makes_it(
    api, vhosts, monkeypatch
):
    batched, single = vhosts(), vhosts()

    result = BrokerReconciler(api).apply(standard_space(batched))
    imports = [c for c in api.writes() if c[1].startswith("/definitions/")]
    assert result.ok and result.verified == addresses(standard_space(batched)), result
    assert imports == [("POST", f"/definitions/{batched}")]
    # Besides the import: the vhost, its manager's grant (RabbitMQ's own, checked), the
    # user, its permissions and topic permissions, the connection limit.
    assert len(api.writes()) <= 6, api.writes()
    assert len(result.created) > 40  # every object is still told, one label each

    api.calls.clear()
    monkeypatch.setattr(rabbitmq_reconciler, "BATCH_MIN", 10_000)  # one call each
    other = BrokerReconciler(api).apply(standard_space(single))
    assert other.ok and sorted(label.replace(single, batched) for label in other.created) == (
        sorted(result.created))
    assert not [c for c in api.writes() if c[1].startswith("/definitions/")]
    assert len(api.writes()) > 40

    assert objects(api, batched) == objects(api, single)
    assert not BrokerReconciler(api).apply(standard_space(batched)).changed  # settled


def test_a_refused_import_is_made_one_call_each_and_fails_only_the_bad_address(api, vhosts):
    vhost = vhosts()
    state = standard_space(vhost, bad_queue="q3")  # a policy RabbitMQ refuses (negative size)

    result = BrokerReconciler(api).apply(state)

    assert [c for c in api.writes() if c[1].startswith("/definitions/")] == [
        ("POST", f"/definitions/{vhost}")]
    assert set(result.errors) == {"q3"}, result.errors
    assert "max-length-bytes" in result.errors["q3"] or "length" in result.errors["q3"]
    assert result.verified == addresses(state) - {"q3"}
    assert "queue:q3" in result.created  # the queue itself is there, without its limits
    assert "policy:" + policy_of(desired_objects(state), "q3") not in result.created


def test_a_few_creates_go_one_call_each(api, vhosts):
    vhost = vhosts()
    state = standard_space(vhost, queues=1, topics=0)
    BrokerReconciler(api).apply(state)
    state.queues.append(BrokerQueue("extra", "queue"))
    api.calls.clear()

    result = BrokerReconciler(api).apply(state)

    assert result.created == ["queue:extra"] and "extra" in result.verified
    assert api.writes() == [("PUT", f"/queues/{vhost}/extra")]
