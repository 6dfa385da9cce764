"""A reconcile reads only its own space from the real RabbitMQ, however many spaces share it.

RabbitMQ users are global, so listing them grows with the fleet (1,000 spaces = 1,000 vhosts
on one broker). Here other vhosts hold 50 MaaS-owned users, and a client that counts what
each read returned (the real client: every call still goes to RabbitMQ) shows that a
reconcile reads the same rows with or without them, never one of theirs, and still removes
its own stale users, with or without permissions, leaving the other spaces' users alone.
"""
import uuid
from urllib.parse import quote, unquote

import pytest

from workers.agents.storage import rabbitmq_reconciler
from workers.agents.storage.desired import BrokerQueue, BrokerTopic, BrokerUser, VhostState
from workers.agents.storage.rabbitmq import (
    OWNER_TAG,
    BrokerReconciler,
    RabbitMQApi,
    broker_username,
    hash_password,
)
from workers.agents.storage.rabbitmq_reconciler import forget_unpermitted

from .clients import API_PASSWORD, API_URL, API_USER

HASH = hash_password("s3cret-pw")
UNPERMITTED = "/users/without-permissions"  # the one read not named by the vhost


class ReadCountingApi(RabbitMQApi):
    """The real client, keeping each GET's path and the rows the broker answered with."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.reads: list[tuple[str, list[dict]]] = []

    def request(self, method, path, body=None, params=None, missing_ok=False, timeout=None):
        answer = super().request(method, path, body, params, missing_ok, timeout)
        if method == "GET":
            rows = answer if isinstance(answer, list) else [answer] if answer else []
            self.reads.append((path, rows))
        return answer


@pytest.fixture(scope="module")
def admin():
    """A plain client for setting up and inspecting the broker (its reads are not counted)."""
    client = RabbitMQApi(API_URL, API_USER, API_PASSWORD, timeout=5)
    client.request("GET", "/overview")  # the set-up starts RabbitMQ: unreachable is a failure
    yield client
    client.close()


@pytest.fixture
def api():
    client = ReadCountingApi(API_URL, API_USER, API_PASSWORD, timeout=5)
    yield client
    client.close()


@pytest.fixture
def reconciler(api):
    return BrokerReconciler(api)


@pytest.fixture
def vhosts(admin):
    """new() names a fresh vhost (or takes the given name); each is removed after the test,
    with its users."""
    made: list[str] = []

    def new(name: str | None = None) -> str:
        made.append(name or "maas-test-" + uuid.uuid4().hex[:10])
        return made[-1]

    yield new
    for vhost in made:
        admin.delete_vhost(vhost)
    for u in admin.list_users():  # the test may list every user: the reconciler may not
        if any(u["name"].endswith("@" + vhost) for vhost in made):
            admin.delete_user(u["name"])


@pytest.fixture
def vhost(vhosts):
    return vhosts()


def make_other_spaces(admin, vhosts, vhost: str) -> dict[str, str]:
    """50 MaaS-owned users with their permissions in 5 other vhosts, as their own reconciles
    leave them; one vhost's name ends with ours (its users' names end with ours too).
    Returns {user: vhost}."""
    others = [vhosts() for _ in range(4)] + [vhosts("pre-" + vhost)]
    users = {}
    for other in others:
        admin.put_vhost(other, "another space", (OWNER_TAG,))
        for i in range(10):
            name = broker_username(other, f"u{i}")
            admin.put_user(name, HASH, (OWNER_TAG,))
            admin.put_permissions(other, name, "", ".*", ".*")
            users[name] = other
    return users


def space_state(vhost: str, *names: str) -> VhostState:
    return VhostState(
        vhost=vhost,
        queues=[BrokerQueue("orders", "queue", deadletter="dlq", ttl_ms=60_000),
                BrokerQueue("dlq", "deadletter"),
                BrokerQueue("news::s1", "subscription", topic="news")],
        topics=[BrokerTopic("news")],
        users=[BrokerUser(broker_username(vhost, n), HASH, send=("*",), recv=("*",))
               for n in names],
        max_connections=20,
    )


def scoped(path: str, vhost: str) -> bool:
    """The read names the vhost, or one of its users."""
    segments = path.split("/")
    if path.startswith("/users/"):
        return unquote(segments[2]).endswith("@" + vhost)
    return quote(vhost, safe="") in segments


def names_in(reads) -> set[str]:
    return {row.get("name") or row.get("user") for _, rows in reads for row in rows}


def rows_of_the_vhost(reads) -> int:
    return sum(len(rows) for path, rows in reads if path != UNPERMITTED)


def users_with_permissions(admin, others: dict[str, str]) -> dict[str, str]:
    """{user: vhost} of the given users that exist and hold permissions on their vhost."""
    existing = {u["name"] for u in admin.list_users()}
    held = {}
    for other in set(others.values()):
        held.update({p["user"]: other for p in admin.list_permissions(other)})
    return {name: v for name, v in others.items() if name in existing and held.get(name) == v}


def test_a_reconcile_reads_the_same_rows_with_50_users_of_other_spaces_as_without(
    admin, api, reconciler, vhost, vhosts
):
    state = space_state(vhost, "app", "ops")
    assert reconciler.apply(state).ok
    api.reads.clear()
    assert not reconciler.apply(state).changed
    alone = list(api.reads)

    others = make_other_spaces(admin, vhosts, vhost)
    api.reads.clear()
    forget_unpermitted()  # read again, as the first drift check of a minute does
    result = reconciler.apply(state)
    crowded = list(api.reads)

    assert not result.changed and result.ok, result
    assert rows_of_the_vhost(crowded) == rows_of_the_vhost(alone)
    assert [p for p, _ in crowded if not scoped(p, vhost)] == [UNPERMITTED]
    assert not names_in(crowded) & set(others)
    # Bounded by the space's own objects: the vhost, its limits and one GET per user, and
    # its queues, exchanges, bindings, policies, permissions and topic permissions (one list
    # each).
    lists = (admin.list_queues(vhost), admin.list_exchanges(vhost), admin.list_bindings(vhost),
             admin.list_policies(vhost), admin.list_permissions(vhost),
             admin.list_topic_permissions(vhost))
    assert rows_of_the_vhost(crowded) <= 2 + len(state.users) + sum(map(len, lists))


def test_creating_changing_and_tearing_down_a_space_never_reads_another(
    admin, api, reconciler, vhost, vhosts
):
    others = make_other_spaces(admin, vhosts, vhost)
    state = space_state(vhost, "app")
    assert reconciler.apply(state).ok  # the vhost is created
    state = space_state(vhost, "app", "ops")
    state.queues.pop(0)
    assert reconciler.apply(state).ok  # a user added, a queue deleted
    assert reconciler.teardown(vhost).ok

    assert [p for p, _ in api.reads if not scoped(p, vhost) and p != UNPERMITTED] == []
    assert not names_in(api.reads) & set(others)
    assert users_with_permissions(admin, others) == others


def test_a_stale_owned_user_is_removed_with_or_without_permissions(
    admin, api, reconciler, vhost, vhosts
):
    others = make_other_spaces(admin, vhosts, vhost)
    state = space_state(vhost, "app", "bob", "carol")
    assert reconciler.apply(state).ok
    bob, carol, dave = (broker_username(vhost, n) for n in ("bob", "carol", "dave"))
    admin.delete_permissions(vhost, bob)  # lost its permissions (by hand, or a failed PUT)
    admin.put_user(dave, HASH, (OWNER_TAG,))  # created, then the agent stopped before its grant
    stranger = broker_username(vhost, "stranger")
    admin.put_user(stranger, HASH)  # named for the vhost, but not MaaS's (no owner tag)
    other_vhost = next(iter(others.values()))
    gone = broker_username(other_vhost, "gone")
    admin.put_user(gone, HASH, (OWNER_TAG,))  # another space's stale user: left to its own

    forget_unpermitted()  # the next drift check, a minute on (the list is reused till then)
    result = reconciler.apply(space_state(vhost, "app"))  # bob, carol and dave were deleted

    assert result.ok, result
    assert sorted(result.deleted) == sorted("user:" + u for u in (bob, carol, dave))
    remaining = {u["name"] for u in admin.list_users()}
    assert {broker_username(vhost, "app"), stranger, gone} <= remaining
    assert not {bob, carol, dave} & remaining
    assert users_with_permissions(admin, others) == others


def test_a_teardown_removes_the_users_a_vhost_deleted_by_hand_left_without_permissions(
    admin, api, reconciler, vhost, vhosts
):
    others = make_other_spaces(admin, vhosts, vhost)
    assert reconciler.apply(space_state(vhost, "app", "ops")).ok
    admin.delete_vhost(vhost)  # or a teardown that deleted it after failing to delete a user

    result = reconciler.teardown(vhost)

    assert result.ok, result
    users = [broker_username(vhost, n) for n in ("app", "ops")]
    assert sorted(result.deleted) == sorted("user:" + u for u in users)
    assert not set(users) & {u["name"] for u in admin.list_users()}
    assert users_with_permissions(admin, others) == others


def test_an_apply_that_is_not_thorough_reads_nothing_but_its_own_space(
    admin, api, reconciler, vhost, vhosts
):
    """What a change (not a resync) asks: not even the broker's users without permissions,
    which RabbitMQ works out from all its users (400 ms at 600 vhosts, docs/scale.md)."""
    others = make_other_spaces(admin, vhosts, vhost)
    state = space_state(vhost, "app")
    assert reconciler.apply(state, thorough=False).ok  # the vhost is created
    state = space_state(vhost, "app", "ops")
    state.queues.pop(0)
    assert reconciler.apply(state, thorough=False).ok  # a user added, a queue deleted

    assert [p for p, _ in api.reads if not scoped(p, vhost)] == []
    assert not names_in(api.reads) & set(others)
    api.reads.clear()
    assert reconciler.apply(state).ok  # a resync: thorough
    assert [p for p, _ in api.reads if not scoped(p, vhost)] == [UNPERMITTED]


def test_drift_checks_reuse_the_brokers_users_without_permissions_for_a_while(
    api, reconciler, vhost, monkeypatch
):
    """RabbitMQ works that list out from all its users, the same for every space of the
    broker: a process reads it once per UNPERMITTED_TTL for all their drift checks. A
    teardown, the last chance to find a vhost's stale users, always reads it."""
    state = space_state(vhost, "app")
    assert reconciler.apply(state).ok
    assert reconciler.apply(state).ok
    assert [p for p, _ in api.reads].count(UNPERMITTED) == 1

    monkeypatch.setattr(rabbitmq_reconciler, "UNPERMITTED_TTL", 0.0)
    api.reads.clear()
    assert reconciler.apply(state).ok
    assert reconciler.apply(state).ok
    assert [p for p, _ in api.reads].count(UNPERMITTED) == 2

    monkeypatch.setattr(rabbitmq_reconciler, "UNPERMITTED_TTL", 3600.0)
    api.reads.clear()
    assert reconciler.apply(state).ok  # the list read a moment ago
    assert [p for p, _ in api.reads].count(UNPERMITTED) == 0
    assert reconciler.teardown(vhost).ok
    assert [p for p, _ in api.reads].count(UNPERMITTED) == 1
