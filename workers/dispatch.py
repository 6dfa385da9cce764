"""Sends a space's pending events to its agents after commit: a Celery task, or a wake-up.

In "inline" mode the Celery worker runs the agents; in "process" mode one `run_agent` process
per address space waits on a Redis channel for the same wake-up. Either way the outbox relay
re-sends what was not acknowledged, so a lost message only delays a change.

Tasks are coalesced: at most one reconcile task per space waits in a queue. A Redis key, set
with SET NX next to the queue, marks it pending; the task deletes the key as it starts, before
it reads the space, so a change that lands while it runs queues exactly one follow-up. And at
most one runs: a task that finds another running its space leaves a note and ends, and the
running task, once done, queues one follow-up for all the notes (`leave_note`, `take_notes`).
"""
import functools
import logging

import redis
from celery import current_app
from django.conf import settings

logger = logging.getLogger(__name__)

# workers/tasks.py's reconcile_space, sent by name: the tasks import this module.
RECONCILE_TASK = "maas.workers.reconcile_space"
PENDING_KEY = "maas:reconcile-pending:{queue}:{uid}"
# How long a key may outlive a task that never started: then the next change or the outbox
# relay queues a new one. The key and its task live in the same Redis (a restart loses both)
# and a killed worker's task goes back to the queue, so the key only has to lapse for a task
# lost some other way, which the resync queues within a minute anyway (`resync_all`, its own
# key). It must outlast any backlog: each time it lapses the relay queues the space again, so
# with 30 s a fill of 1,000 spaces whose vhosts wait to start piles up duplicates (9,556 tasks
# for 1,000 spaces), and the spaces not yet reconciled wait behind them.
CHANGE_PENDING_SECONDS = 600
RESYNC_PENDING_RUNS = 5


def notify_space(space_uid, *, only_behind: bool = False) -> bool:
    """Wakes the space's agents; `only_behind`: the task runs only those still behind (the
    relay's re-sends, most of which find the change applied by then). False if the wake-up
    could not go out (Redis down): the outbox relay delivers it later."""
    try:
        if settings.MAAS_AGENT_MODE == "process" or settings.MAAS_INFRA_BACKEND == "kubernetes":
            from workers.wakeup import publish

            publish(space_uid)  # run_agent processes (on Kubernetes: each space's agent pod)
        if settings.MAAS_AGENT_MODE != "process":
            queue_reconcile(space_uid, only_behind=only_behind)  # or one waits already
    except Exception:  # broker down: the outbox relay will deliver it later
        logger.warning("fanout.deferred", extra={"space": str(space_uid)}, exc_info=True)
        return False
    return True


def queue_reconcile(space_uid, *, resync: bool = False, only_behind: bool = False,
                    countdown: float = 0.0) -> bool:
    """Queues `reconcile_space` unless one for the space already waits; True if queued.

    Changes go to the default queue; `resync` tasks to a queue of their own, so a change never
    waits behind resync work. `countdown`: the task is not run before that many seconds."""
    key = _pending_key(space_uid, resync)
    ttl = RESYNC_PENDING_RUNS * settings.MAAS_RESYNC_INTERVAL if resync \
        else CHANGE_PENDING_SECONDS
    if not _redis().set(key, 1, nx=True, ex=max(int(ttl), 1)):
        return False
    kwargs = {"resync": resync, "only_behind": only_behind}
    try:
        current_app.send_task(RECONCILE_TASK, (str(space_uid),), kwargs, queue=_queue(resync),
                              countdown=countdown or None)
    except Exception:
        _redis().delete(key)  # nothing is pending after all
        raise
    return True


# An agent's address error to retry (an autoLink not active yet: the broker connection was
# coming back when the agent looked) is tried again after 2, 4 and 8 s, not only at the next
# resync tick a minute later; one that outlasts these waits for the ticks. Counted per space and
# agent for a resync interval, so a lasting error costs three extra runs a minute at most.
FOLLOW_UP_KEY = "maas:follow-up:{uid}:{kind}"
FOLLOW_UPS = 3


def queue_follow_up(space_uid, kind: str) -> bool:
    """Queues a resync of the space soon after an agent left an address error to retry (at
    most FOLLOW_UPS a resync interval); True if queued."""
    if settings.MAAS_AGENT_MODE == "process":
        return False  # each run_agent process resyncs its own space on a timer
    key = FOLLOW_UP_KEY.format(uid=space_uid, kind=kind)
    try:
        client = _redis()
        count = client.incr(key)
        if count == 1:
            client.expire(key, max(1, int(settings.MAAS_RESYNC_INTERVAL)))
        if count > FOLLOW_UPS:
            return False
        return queue_reconcile(space_uid, resync=True, only_behind=True, countdown=2.0 ** count)
    except Exception:  # noqa: BLE001 - Redis down: the resync tick retries it
        logger.warning("fanout.follow_up_failed", extra={"space": str(space_uid)}, exc_info=True)
        return False


# A task that found its space's turn taken (workers.agents.runner.space_turn) notes here what it
# came for, a change or a drift check; the task that has the turn takes the notes when it is
# done and queues one follow-up. A note outlives a lost worker no longer than a pending key.
NOTE_KEY = "maas:reconcile-again:{uid}"
CHECK, CHANGE = "check", "change"


def leave_note(space_uid, *, check: bool) -> None:
    """The task that runs the space now is to run it once more after (a drift check if
    `check`). With Redis down the note is lost and the outbox relay re-sends the change."""
    key = NOTE_KEY.format(uid=space_uid)
    try:
        _redis().pipeline().sadd(key, CHECK if check else CHANGE).expire(
            key, CHANGE_PENDING_SECONDS).execute()
    except redis.RedisError:
        logger.warning("fanout.note_failed", extra={"space": str(space_uid)}, exc_info=True)


def take_notes(space_uid) -> set[str]:
    """The notes left for the space since they were last taken (CHECK, CHANGE), removed."""
    key = NOTE_KEY.format(uid=space_uid)
    try:
        notes, _ = _redis().pipeline().smembers(key).delete(key).execute()
    except redis.RedisError:  # the relay re-sends what is left unapplied
        logger.warning("fanout.note_failed", extra={"space": str(space_uid)}, exc_info=True)
        return set()
    return {note.decode() for note in notes}


def claim(space_uid, *, resync: bool = False) -> None:
    """The task has started: a change from now on needs a task of its own."""
    try:
        _redis().delete(_pending_key(space_uid, resync))
    except redis.RedisError:  # the key expires; the relay re-sends what is left unapplied
        logger.warning("fanout.claim_failed", extra={"space": str(space_uid)}, exc_info=True)


def _queue(resync: bool) -> str:
    return settings.MAAS_RESYNC_QUEUE if resync else settings.CELERY_TASK_DEFAULT_QUEUE


def _pending_key(space_uid, resync: bool) -> str:
    return PENDING_KEY.format(queue=_queue(resync), uid=space_uid)


def _redis() -> redis.Redis:
    # The keys live in Celery's broker: a Redis restart loses them with the tasks they mark.
    return _client(settings.CELERY_BROKER_URL)


@functools.lru_cache(maxsize=4)
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
