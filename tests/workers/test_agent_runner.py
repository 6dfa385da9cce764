"""The agent runner holds no database transaction (and no row lock) while an agent talks to
its target, still runs one reconcile per (space, kind) at a time across connections, and
records what it applied in one statement of its own (real PostgreSQL)."""
import threading
import time
from datetime import datetime

import pytest
from django.db import connection
from django.utils import timezone

from config_service import services
from config_service.models import AgentState, AppliedEvent
from eventlog.models import Outbox
from tests.conftest import CTX
from tests.workers import celery_queue
from workers import dispatch
from workers.agents import runner


class ProbeAgent(runner.Agent):
    """Notes, while it "talks to the network", whether its connection is in a transaction,
    and how many reconciles of its kind run at the same time."""

    kind = "storage"

    def __init__(self, pause: float = 0.0):
        self.pause, self.running, self.most = pause, 0, 0
        self.in_transaction: list[bool] = []
        self.lock = threading.Lock()

    def reconcile(self, space):
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        self.in_transaction.append(connection.in_atomic_block)
        time.sleep(self.pause)  # a slow broker
        with self.lock:
            self.running -= 1
        return runner.Report()


@pytest.fixture
def space(transactional_db, tenant):
    return services.create_address_space(ctx=CTX, tenant=tenant, name="probe", type="brokered",
                                         plan="brokered-single-broker")


def test_no_transaction_is_open_while_the_agent_talks_to_its_target(space):
    agent = ProbeAgent()
    assert runner.run(space.uid, "storage", agent) == space.last_sequence
    assert agent.in_transaction == [False]
    state = AgentState.objects.get(space_uid=space.uid, kind="storage")
    assert state.applied_sequence == space.last_sequence


def test_reconciles_of_one_space_and_kind_never_overlap(space):
    agent = ProbeAgent(pause=0.3)

    def one_run():
        try:
            runner.run(space.uid, "storage", agent)
        finally:
            connection.close()  # each thread had a connection of its own

    threads = [threading.Thread(target=one_run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert agent.most == 1 and len(agent.in_transaction) == 3


def test_an_invalidation_that_came_during_a_reconcile_is_kept(space):
    class Invalidating(ProbeAgent):
        def reconcile(self, space):  # the router restarts while this reconcile runs
            AgentState.objects.filter(space_uid=space.uid, kind="storage").update(
                invalidated="Router restarted", invalidated_at=timezone.now())
            return super().reconcile(space)

    runner.run(space.uid, "storage", Invalidating())
    state = AgentState.objects.get(space_uid=space.uid, kind="storage")
    assert state.invalidated == "Router restarted"
    runner.run(space.uid, "storage", ProbeAgent())  # the restore that follows
    state.refresh_from_db()
    assert state.invalidated == "" and state.invalidated_at is None


@pytest.fixture
def standard(transactional_db, tenant):
    made = services.create_address_space(ctx=CTX, tenant=tenant, name="std", type="standard",
                                         plan="standard-unlimited")
    services.create_address(ctx=CTX, space=made, address="orders", type="queue",
                            plan="standard-small-queue")
    made.refresh_from_db()
    return made


def kind_agent(kind: str, errors: dict | None = None) -> ProbeAgent:
    agent = ProbeAgent()
    agent.kind = kind
    agent.reconcile = lambda space: runner.Report(address_errors=errors or {})
    return agent


def test_the_record_covers_each_event_once_and_acknowledges_once_every_agent_applied(
        standard):
    """One agent's record: its errors, an AppliedEvent per event with its latency; the outbox
    acknowledged only when the router agent has applied too and neither has an error left to
    retry; an older sequence recorded later (a slow duplicate) moves nothing back and counts
    nothing twice."""
    last = standard.last_sequence
    errors = {"orders": {"message": "Not yet verified", "permanent": False}}
    runner.run(standard.uid, "storage", kind_agent("storage", errors))
    state = AgentState.objects.get(space_uid=standard.uid, kind="storage")
    assert (state.applied_sequence, state.address_errors) == (last, errors)
    applied = AppliedEvent.objects.filter(event__stream_id=standard.uid, kind="storage")
    assert sorted(applied.values_list("event__sequence", flat=True)) == list(range(1, last + 1))
    assert all(0 <= a.latency_seconds < 60 for a in applied)
    pending = Outbox.objects.filter(stream_uid=standard.uid, acked_at__isnull=True)
    assert pending.count() == last  # the router agent has applied nothing yet
    runner.run(standard.uid, "router", kind_agent("router"))
    assert pending.count() == last  # the storage agent has an error to retry: the relay re-sends
    runner.run(standard.uid, "storage", kind_agent("storage"), only_if_behind=True)
    assert pending.count() == 0
    assert applied.count() == last

    runner._record(standard, "storage", 1, runner.Report(), timezone.now())
    state.refresh_from_db()
    assert (state.applied_sequence, state.address_errors) == (last, {})
    assert applied.count() == last


@pytest.mark.parametrize("errors, space_error, acknowledged", [
    ({}, "", True),
    ({"orders": {"message": "Plan refused", "permanent": True}}, "", True),
    ({"orders": {"message": "Router autoLink to the broker is not active",
                 "permanent": False}}, "", False),
    ({"orders": {"message": "Router autoLink to the broker is not active"}}, "", False),
    ({}, "Router policy not yet verified", False),
])
def test_an_event_is_acknowledged_only_once_no_agent_has_it_to_retry(
        standard, errors, space_error, acknowledged):
    """Left unacknowledged, the relay re-sends the event within MAAS_RELAY_AFTER_SECONDS and
    the agent retries; acknowledged, only the next resync would. Whichever agent records last,
    the other's state counts as well as its own outcome."""
    pending = Outbox.objects.filter(stream_uid=standard.uid, acked_at__isnull=True)
    router = kind_agent("router")
    router.reconcile = lambda space: runner.Report(address_errors=errors, space_error=space_error)
    runner.run(standard.uid, "router", router)
    runner.run(standard.uid, "storage", kind_agent("storage"))
    assert (pending.count() == 0) is acknowledged
    runner._ack_outbox(standard.uid, standard)  # the runner's own check when nothing is behind
    assert (pending.count() == 0) is acknowledged
    runner.run(standard.uid, "router", kind_agent("router"), only_if_behind=True)  # the retry
    assert pending.count() == 0


def test_an_error_to_retry_is_tried_again_within_seconds_three_times_a_resync_interval(
        standard, settings):
    """A drift check that finds an autoLink not active yet (the broker connection coming back)
    has no event for the outbox relay to re-send: the space is queued again after 2, 4 and 8 s,
    then left to the resync ticks; a permanent error queues nothing."""
    queue = settings.MAAS_RESYNC_QUEUE
    celery_queue.take_all(queue)
    key = dispatch.FOLLOW_UP_KEY.format(uid=standard.uid, kind="router")
    dispatch._redis().delete(key)
    retry = {"orders": {"message": "Router autoLink to the broker is not active",
                        "permanent": False}}
    etas = []
    for _ in range(dispatch.FOLLOW_UPS + 1):
        ran = time.time()
        runner.run(standard.uid, "router", kind_agent("router", retry), check=True)
        etas += [(datetime.fromisoformat(eta).timestamp() - ran)
                 for eta in celery_queue.etas(queue).values()]
        assert celery_queue.waiting(queue, standard.uid) in (
            [], [("maas.workers.reconcile_space", [str(standard.uid)],
                  {"resync": True, "only_behind": True})])
        celery_queue.take_all(queue)
        dispatch.claim(standard.uid, resync=True)  # what the queued task does as it starts
    assert [round(eta) for eta in etas] == [2, 4, 8]
    dispatch._redis().delete(key)
    permanent = {"orders": {"message": "Plan refused", "permanent": True}}
    runner.run(standard.uid, "router", kind_agent("router", permanent), check=True)
    assert celery_queue.waiting(queue) == []
