"""The agents of a standard space run at once for changes that need nothing of the broker
first, and one after the other (storage, then router) for everything else; an agent a change
leaves alone (the storage controller and new anycast addresses) is recorded without a run."""
import threading
import uuid

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext

from config_service import services
from config_service.models import AddressSpace, AgentState, AppliedEvent
from eventlog.models import Outbox
from tests.conftest import CTX, b64
from tests.workers.conftest import sync
from tests.workers.test_standard_space_e2e import add, phases
from workers import tasks
from workers.agents import runner
from workers.agents.storage import agent as controller


@pytest.fixture
def space(tenant, router, redis_server):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"ord{uuid.uuid4().hex[:5]}",
                                      type="standard", plan="standard-medium")
    sync(s)
    yield s
    if AddressSpace.objects.filter(uid=s.uid, terminating=False).exists():
        services.delete_address_space(ctx=CTX, space=s)
        sync(s)


@pytest.fixture
def runs(monkeypatch):
    """(agent kind, thread) of every agent run of reconcile_space."""
    seen = []
    real = runner.run

    def run(space_uid, kind, *args, **kwargs):
        seen.append((kind, threading.current_thread()))
        return real(space_uid, kind, *args, **kwargs)

    monkeypatch.setattr(runner, "run", run)
    return seen


def pending(space):
    return runner.pending_events(space.uid, "router")


def make_user(space, username="app"):
    services.create_messaging_user(ctx=CTX, space=space, username=username,
                                   authentication={"type": "password", "password": b64("app-password")},
                                   authorization=[{"addresses": ["*"],
                                                   "operations": ["send", "recv"]}])


def test_router_only_changes_run_the_agents_at_once(space):
    add(space, "a1", "anycast", "standard-small-anycast")
    add(space, "m1", "multicast", "standard-small-multicast")
    make_user(space)
    assert tasks._router_only(pending(space))
    add(space, "q1", "queue", "standard-small-queue")
    assert not tasks._router_only(pending(space))  # its autoLinks need the broker's queue first


def test_a_resync_keeps_the_order(space):
    assert not tasks._router_only(pending(space))  # nothing new: a drift check


def test_a_user_change_runs_both_agents_each_in_its_thread(space, runs):
    make_user(space, "fast")
    tasks.reconcile_space(str(space.uid))
    assert sorted(kind for kind, _ in runs) == ["router", "storage"]
    assert all(thread is not threading.main_thread() for _, thread in runs)
    assert runs[0][1] is not runs[1][1]
    add(space, "stored", "queue", "standard-small-queue")
    runs.clear()
    tasks.reconcile_space(str(space.uid))
    assert [kind for kind, _ in runs] == ["storage", "router"]  # in order, in this thread
    assert all(thread is threading.main_thread() for _, thread in runs)


def test_the_agents_threads_keep_their_database_sessions(space, monkeypatch):
    """A session per agent per change cost PostgreSQL a backend start each time (three per
    anycast create, about as much CPU as the reconcile): the pool's threads keep theirs."""
    sessions = []
    real = runner.run

    def run(space_uid, kind, *args, **kwargs):
        from django.db import connection

        result = real(space_uid, kind, *args, **kwargs)
        sessions.append((threading.current_thread(), connection.connection.info.backend_pid))
        return result

    monkeypatch.setattr(runner, "run", run)
    for name in ("k1", "k2", "k3"):
        make_user(space, name)
        tasks.reconcile_space(str(space.uid))
    first = set(sessions[:2])
    assert len(sessions) == 6 and set(sessions[2:]) <= first  # the same threads, same backends


def test_the_storage_agent_asks_the_broker_only_when_something_stored_changed(
        space, monkeypatch):
    asked = []
    real = controller.management_api
    monkeypatch.setattr(controller, "management_api",
                        lambda broker: asked.append(broker.api_url) or real(broker))
    add(space, "a2", "anycast", "standard-small-anycast")
    add(space, "m2", "multicast", "standard-small-multicast")
    runner.run(space.uid, "storage")
    assert asked == []  # nothing of the broker changes
    runner.run(space.uid, "router")
    assert set(phases(space).values()) == {"Active"}
    add(space, "q2", "queue", "standard-small-queue")
    runner.run(space.uid, "storage")
    assert asked == [settings.RABBITMQ_API_URL]  # the space's one broker, once
    runner.run(space.uid, "storage")  # no new event: a resync, which checks the broker
    assert asked == [settings.RABBITMQ_API_URL] * 2


def storage_state(space):
    return AgentState.objects.get(space_uid=space.uid, kind="storage")


def test_an_anycast_change_records_the_storage_controller_without_running_it(space, runs):
    """Nothing of the broker changes: the storage controller's state moves to the new
    sequence, with its AppliedEvent and the outbox acknowledged, in one statement under its
    lock, and the router agent runs alone in the task's thread."""
    add(space, "fast", "anycast", "standard-small-anycast")
    add(space, "multi", "multicast", "standard-small-multicast")
    last = AddressSpace.objects.get(uid=space.uid).last_sequence
    with CaptureQueriesContext(connection) as queries:
        assert runner.record_unaffected(space.uid, "standard", "storage") == last
    assert len(queries.captured_queries) == 3  # the lock, the record, the unlock
    assert storage_state(space).applied_sequence == last
    assert set(AppliedEvent.objects.filter(event__stream_id=space.uid, kind="storage",
                                           event__sequence__gt=last - 2)
               .values_list("event__sequence", flat=True)) == {last - 1, last}

    add(space, "faster", "anycast", "standard-small-anycast")
    tasks.reconcile_space(str(space.uid))
    assert [(kind, thread) for kind, thread in runs] == [("router", threading.main_thread())]
    assert phases(space) == {"fast": "Active", "multi": "Active", "faster": "Active"}
    assert storage_state(space).applied_sequence == space_last(space)
    assert not Outbox.objects.filter(stream_uid=space.uid, acked_at__isnull=True).exists()


def space_last(space):
    return AddressSpace.objects.get(uid=space.uid).last_sequence


def test_the_storage_controller_runs_when_its_own_events_need_the_broker(space):
    """The router agent's events decide whether to ask; the storage controller's own, read
    under its lock, decide: a queue it has not applied yet (the router ran ahead) needs it."""
    before = storage_state(space).applied_sequence
    add(space, "q", "queue", "standard-small-queue")
    add(space, "any", "anycast", "standard-small-anycast")
    assert runner.record_unaffected(space.uid, "standard", "storage") is None
    assert storage_state(space).applied_sequence == before
    assert not AppliedEvent.objects.filter(event__stream_id=space.uid, kind="storage",
                                           event__sequence__gt=before).exists()


@pytest.mark.parametrize("state_of", [
    {"invalidated": "broker restarted"},  # a run repairs the vhost first
    {"applied_at": None},  # never ran: the vhost may not exist
])
def test_a_storage_state_to_repair_is_run_not_recorded(space, runs, state_of):
    AgentState.objects.filter(space_uid=space.uid, kind="storage").update(**state_of)
    add(space, "any", "anycast", "standard-small-anycast")
    assert runner.record_unaffected(space.uid, "standard", "storage") is None
    tasks.reconcile_space(str(space.uid))
    assert sorted(kind for kind, _ in runs) == ["router", "storage"]
    assert storage_state(space).applied_sequence == space_last(space)
    assert storage_state(space).invalidated == ""


def test_a_terminating_space_is_not_recorded(space):
    add(space, "any", "anycast", "standard-small-anycast")
    AddressSpace.objects.filter(uid=space.uid).update(terminating=True)
    assert runner.record_unaffected(space.uid, "standard", "storage") is None
    AddressSpace.objects.filter(uid=space.uid).update(terminating=False)


def test_the_storage_errors_stay_and_keep_the_outbox_unacknowledged(space):
    """As the run would (`nothing_to_store` reports the last errors again): an error left to
    retry keeps the event unacknowledged, so the relay sends the space again."""
    errors = {f"{space.name}.q": {"message": "Not yet verified on the broker",
                                  "permanent": False}}
    AgentState.objects.filter(space_uid=space.uid, kind="storage").update(address_errors=errors)
    add(space, "any", "anycast", "standard-small-anycast")
    runner.run(space.uid, "router")
    assert runner.record_unaffected(space.uid, "standard", "storage") == space_last(space)
    assert storage_state(space).address_errors == errors
    assert Outbox.objects.filter(stream_uid=space.uid, acked_at__isnull=True,
                                 sequence=space_last(space)).exists()


def test_the_task_reads_the_space_and_the_router_agents_events_in_one_statement(space):
    add(space, "e1", "anycast", "standard-small-anycast")
    make_user(space, "u1")
    with CaptureQueriesContext(connection) as queries:
        read = runner.space_to_run(space.uid, "router", ("standard",))
    assert len(queries.captured_queries) == 1
    assert (read.type, read.terminating) == ("standard", False)
    assert read.events == pending(space) and [t for t, _ in read.events] == [
        "address.created", "messaging_user.created"]
    assert read.events[0][1]["type"] == "anycast"

    assert runner.space_to_run(space.uid, "router", ("brokered",)).events is None  # not asked
    assert runner.space_to_run(space.uid, "router", ()).events is None  # (only infra on k8s)
    for i in range(runner.PENDING_LIMIT):
        add(space, f"many{i}", "anycast", "standard-small-anycast")
    assert pending(space) is None and runner.space_to_run(space.uid, "router", ("standard",)).events is None
    AddressSpace.objects.filter(uid=space.uid).update(terminating=True)
    assert runner.space_to_run(space.uid, "router", ("standard",)).events is None
    AddressSpace.objects.filter(uid=space.uid).update(terminating=False)
    assert runner.space_to_run(uuid.uuid4(), "router", ("standard",)) is None


def test_an_anycast_create_costs_the_task_fourteen_statements(space):
    """The space's turn (2: the try-lock and its release, no row read), the space with the
    router agent's events (1), the storage controller recorded (3: the lock, the record, the
    unlock), the router agent's run (8: see test_incremental_reconcile)."""
    add(space, "counted", "anycast", "standard-small-anycast")
    with CaptureQueriesContext(connection) as queries:
        tasks.reconcile_space(str(space.uid))
    assert len(queries.captured_queries) == 14, "\n".join(
        q["sql"][:120] for q in queries.captured_queries)
    assert phases(space) == {"counted": "Active"}


def checked(space) -> dict:
    """{agent kind: (applied_at, checked_at)} of the space."""
    return {kind: (applied, at) for kind, applied, at in AgentState.objects.filter(
        space_uid=space.uid).values_list("kind", "applied_at", "checked_at")}


def test_only_a_comparison_of_the_whole_space_moves_its_drift_check_clock(space):
    """A drift check (a resync) compares the whole space with each target: `checked_at`. The
    short paths apply a change from its new addresses alone (the router agent's new anycast
    entities, the storage controller recorded unaffected or adding a queue): `applied_at`
    moves and `checked_at` stays, so the space's drift check still comes round; and the
    check takes none of them, whatever is pending."""
    tasks.reconcile_space(str(space.uid), resync=True)
    first = checked(space)
    assert all(at is not None for _, at in first.values())

    add(space, "fast", "anycast", "standard-small-anycast")
    tasks.reconcile_space(str(space.uid))
    add(space, "q", "queue", "standard-small-queue")
    tasks.reconcile_space(str(space.uid))
    assert phases(space) == {"fast": "Active", "q": "Active"}
    after = checked(space)
    assert after["storage"][0] > first["storage"][0] and after["router"][0] > first["router"][0]
    assert after["storage"][1] == first["storage"][1]  # recorded, then the queue alone added
    assert after["router"][1] > first["router"][1]  # the queue's autoLinks: a full diff

    add(space, "faster", "anycast", "standard-small-anycast")
    tasks.reconcile_space(str(space.uid))
    assert checked(space)["router"][1] == after["router"][1]  # the new entities alone

    # A drift check with a change pending (a busy space) compares the whole space all the same
    add(space, "fastest", "anycast", "standard-small-anycast")
    tasks.reconcile_space(str(space.uid), resync=True)
    assert all(checked(space)[kind][1] > after[kind][1] for kind in ("storage", "router"))
    assert phases(space)["fastest"] == "Active"
