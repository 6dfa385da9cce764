"""Fan-out coalescing: many changes to one space wait as one reconcile task, one task runs a
space at a time, and a change that lands while a reconcile runs gets a follow-up, so every
accepted change is applied once."""
import threading

import pytest
from django.conf import settings
from django.db import connection

from config_service import services
from config_service.models import AddressSpace, AgentState, AppliedEvent
from eventlog.models import ConfigEvent
from tests.conftest import CTX, Worker, wait_for
from tests.workers import celery_queue, rabbit
from workers.agents import runner
from workers.agents.storage.agent import StorageController
from workers.tasks import reconcile_space

QUEUE = settings.CELERY_TASK_DEFAULT_QUEUE


@pytest.fixture
def space(transactional_db, redis_server, tenant):
    """A brokered space whose changes fan out after each commit, with no worker running."""
    celery_queue.take_all(QUEUE)
    s = services.create_address_space(ctx=CTX, tenant=tenant, name="burst", type="brokered",
                                      plan="brokered-single-broker")
    yield s
    services.delete_address_space(ctx=CTX, space=s)
    runner.run(s.uid, "storage")


@pytest.fixture
def worker(transactional_db, redis_server):
    """A real worker, started by the test when its tasks are queued."""
    w = Worker(settings.DATABASES["default"]["NAME"])
    yield w
    w.stop()


def queue(space, name):
    services.create_address(ctx=CTX, space=space, address=name, type="queue",
                            plan="brokered-queue")


def storage_caught_up(space) -> bool:
    last = AddressSpace.objects.get(uid=space.uid).last_sequence
    return AgentState.objects.filter(space_uid=space.uid, kind="storage",
                                     applied_sequence=last).exists()


def each_event_applied_once(space) -> bool:
    events = ConfigEvent.objects.filter(stream_id=space.uid).count()
    return AppliedEvent.objects.filter(event__stream_id=space.uid, kind="storage").count() == events


def test_many_changes_to_one_space_wait_as_one_task_and_are_all_applied(space, worker):
    names = [f"q{i:02d}" for i in range(20)]
    for name in names:
        queue(space, name)
    assert len(celery_queue.waiting(QUEUE, space.uid)) == 1  # 21 changes, one task
    worker.start()
    wait_for(lambda: storage_caught_up(space), 60, what="the storage agent to catch up")
    assert set(names) <= rabbit.queue_names(space.vhost)
    assert each_event_applied_once(space)


def test_a_change_made_while_a_reconcile_runs_gets_a_follow_up_and_is_applied(
        space, worker, monkeypatch):
    queue(space, "first")
    celery_queue.take_all(QUEUE)  # this test runs the waiting task itself, below
    reconcile = StorageController.reconcile

    def reconcile_with_a_change_meanwhile(self, target):
        # The space was read; another request commits a change before the agent is done.
        change = threading.Thread(target=lambda: (queue(space, "second"), connection.close()))
        change.start()
        change.join()
        return reconcile(self, target)

    monkeypatch.setattr(StorageController, "reconcile", reconcile_with_a_change_meanwhile)
    reconcile_space(str(space.uid))
    monkeypatch.undo()
    assert not storage_caught_up(space)  # that reconcile could not account for the change
    assert len(celery_queue.waiting(QUEUE, space.uid)) == 1  # the follow-up
    worker.start()
    wait_for(lambda: storage_caught_up(space), 60, what="the follow-up to apply the change")
    assert {"first", "second"} <= rabbit.queue_names(space.vhost)
    assert each_event_applied_once(space)


def test_a_task_that_finds_its_space_running_frees_its_slot_and_the_runner_follows_up(
        space, worker, monkeypatch):
    """Behind one slow space every slot of the agents' worker (4) waited on that space's lock
    and other spaces' changes waited for a slot. A task that finds its space running leaves a
    note and ends at once; the running task then queues one follow-up for the changes and
    one drift check for the drift checks noted."""
    queue(space, "first")
    celery_queue.take_all(QUEUE)  # this test runs the tasks itself, below
    entered, release = threading.Event(), threading.Event()
    reconcile = StorageController.reconcile

    def slow_reconcile(self, target):
        entered.set()
        release.wait(60)
        return reconcile(self, target)

    def task(**kwargs):
        reconcile_space(str(space.uid), **kwargs)
        connection.close()

    monkeypatch.setattr(StorageController, "reconcile", slow_reconcile)
    running = threading.Thread(target=task)
    running.start()
    try:
        assert entered.wait(30)
        queue(space, "second")
        celery_queue.take_all(QUEUE)  # its task runs here, beside the slow one, three times
        others = [threading.Thread(target=task, kwargs=kwargs)
                  for kwargs in ({}, {"resync": True, "only_behind": True}, {"resync": True})]
        for t in others:
            t.start()
        for t in others:
            t.join(15)
        assert not any(t.is_alive() for t in others)  # none waited for the slow one
        assert not celery_queue.waiting(QUEUE, space.uid)  # notes, no task yet
    finally:
        release.set()
        running.join(60)
    monkeypatch.undo()
    assert not storage_caught_up(space)  # the slow run read the space before "second"
    assert len(celery_queue.waiting(QUEUE, space.uid)) == 1  # one follow-up for two notes
    [(_, _, kwargs)] = celery_queue.waiting(settings.MAAS_RESYNC_QUEUE, space.uid)
    assert kwargs == {"resync": True, "only_behind": False}  # the drift check, kept
    celery_queue.take_all(settings.MAAS_RESYNC_QUEUE)
    worker.start()
    wait_for(lambda: storage_caught_up(space), 60, what="the follow-up to apply the change")
    assert {"first", "second"} <= rabbit.queue_names(space.vhost)
    assert each_event_applied_once(space)


def test_the_outbox_relay_adds_no_task_while_one_waits_behind_a_backlog(space):
    """A task may wait minutes behind others (a fill of 1,000 spaces): the relay, which re-sends
    every space with unacknowledged events, must not queue it again meanwhile, or each wait
    breeds duplicates (9,556 tasks for 1,000 spaces when the pending mark lasted 30 s)."""
    from datetime import timedelta

    import redis
    from django.utils import timezone

    from eventlog.models import Outbox
    from workers import dispatch
    from workers.tasks import relay_outbox

    queue(space, "orders")
    assert len(celery_queue.waiting(QUEUE, space.uid)) == 1
    key = dispatch._pending_key(space.uid, False)
    # The mark outlasts a backlog the size of the visibility timeout, a worker's longest hold.
    ttl = redis.Redis.from_url(settings.CELERY_BROKER_URL).ttl(key)
    assert ttl > settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]
    for _ in range(3):  # unacknowledged for longer than the relay waits, three relays running
        Outbox.objects.filter(stream_uid=space.uid).update(
            created_at=timezone.now() - timedelta(minutes=5), last_sent_at=None)
        assert relay_outbox() >= 1
    assert len(celery_queue.waiting(QUEUE, space.uid)) == 1


def test_a_relayed_task_runs_only_the_agents_still_behind(space):
    """What the relay re-sends has mostly been applied by the time it runs: it must not cost
    a full reconcile of the space again."""
    from datetime import timedelta

    from django.utils import timezone

    from eventlog.models import Outbox
    from workers import dispatch
    from workers.tasks import relay_outbox

    queue(space, "orders")
    celery_queue.take_all(QUEUE)  # the change's task was lost (Redis restarted empty)
    dispatch.claim(space.uid)  # and its pending mark with it
    Outbox.objects.filter(stream_uid=space.uid).update(
        created_at=timezone.now() - timedelta(minutes=5), last_sent_at=None)
    assert relay_outbox() >= 1
    [(_, _, kwargs)] = celery_queue.waiting(QUEUE, space.uid)
    assert kwargs == {"resync": False, "only_behind": True}



def test_the_relay_counts_a_resend_only_once_it_went_out(space, redis_server):
    """With Redis down nothing is sent: the outbox rows keep their attempts and stay due, so
    the first tick after Redis is back sends them, not one a relay interval later."""
    from datetime import timedelta

    from django.utils import timezone

    from eventlog.models import Outbox
    from workers import dispatch
    from workers.tasks import relay_outbox

    queue(space, "orders")
    celery_queue.take_all(QUEUE)
    dispatch.claim(space.uid)
    rows = Outbox.objects.filter(stream_uid=space.uid)
    rows.update(created_at=timezone.now() - timedelta(minutes=5), last_sent_at=None)
    redis_server.stop()
    try:
        assert relay_outbox() == 0
        assert [(r.attempts, r.last_sent_at) for r in rows.all()] == [(0, None)] * rows.count()
    finally:
        redis_server.start()
    assert relay_outbox() == 1
    assert all(r.attempts == 1 and r.last_sent_at is not None for r in rows.all())
    assert len(celery_queue.waiting(QUEUE, space.uid)) == 1


@pytest.mark.parametrize("longest", [300, 45])
def test_the_relay_backs_off_from_a_space_it_keeps_resending(space, settings, longest):
    """A space whose agent keeps failing on a change (nothing acknowledged) is re-sent 10 s
    after the change, then after twice the wait before each time, up to the longest wait; its
    rows all take the space's count, so a row with fewer re-sends does not make it due sooner."""
    from datetime import timedelta

    from django.utils import timezone

    from eventlog.models import Outbox
    from workers.tasks import relay_outbox

    settings.MAAS_RELAY_AFTER_SECONDS, settings.MAAS_RELAY_MAX_BACKOFF_SECONDS = 10, longest
    queue(space, "orders")
    rows = Outbox.objects.filter(stream_uid=space.uid, acked_at__isnull=True)
    assert relay_outbox() == 0  # written just now: its own notification is on its way
    rows.update(created_at=timezone.now() - timedelta(seconds=11))
    assert relay_outbox() == 1
    waits = []
    for _ in range(6):
        assert relay_outbox() == 0  # just sent
        wait = 10
        while True:  # the shortest wait, in steps of 5 s, after which it is due again
            rows.update(last_sent_at=timezone.now() - timedelta(seconds=wait + 1))
            if relay_outbox():
                break
            wait += 5
        waits.append(wait)
        if len(waits) == 2:
            # A change whose row was written before the last re-send (attempts 0): not due on
            # its own, and counted with the space's rows from the next re-send on.
            queue(space, "late")
            rows.filter(attempts=0).update(created_at=timezone.now() - timedelta(seconds=11))
    assert waits == [min(w, longest) for w in (20, 40, 80, 160, 320, 640)]
    attempts = set(rows.values_list("attempts", flat=True))
    assert attempts == {7} and rows.count() == space_events(space)


def space_events(space) -> int:
    return ConfigEvent.objects.filter(stream_id=space.uid).count()
