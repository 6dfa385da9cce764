"""Celery tasks: reconcile a space with its agents, relay the outbox, resync everything.

Tasks take ids, never model objects; a missing space is logged and dropped; only transient
errors of a target (broker unreachable) are retried, with backoff.
"""
import logging
import math
import random
from concurrent.futures import wait
from datetime import UTC, datetime, timedelta

from celery import shared_task
from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import BooleanField, Max, Q
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce
from django.utils import timezone

from config_service.models import AddressSpace, AgentState
from config_service.status import ROUTER_ONLY_TYPES, SPACE_TYPES
from core.threads import process_pool
from eventlog.models import Outbox
from workers import dispatch, endpoints
from workers.agents import runner, statements
from workers.agents.router import tables as router_tables
from workers.agents.router import watch as router_watch
from workers.agents.router.agent import management_client
from workers.clients.qdr import RouterUnreachable
from workers.dispatch import notify_space

logger = logging.getLogger(__name__)


def drift_check_ticks() -> int:
    """A space is checked for drift (every agent compares the whole space with its target) at
    least once in this many resync ticks, busy or quiet: its changes mostly take the short
    paths, which compare only what they add (MAAS_DRIFT_CHECK_PERIOD over
    MAAS_RESYNC_INTERVAL: 5 by default)."""
    return max(1, round(settings.MAAS_DRIFT_CHECK_PERIOD / settings.MAAS_RESYNC_INTERVAL))


# A target down (broker, router) is retried for as long as it takes: a change is never dropped.
@shared_task(name="maas.workers.reconcile_space", bind=True, acks_late=True,
             max_retries=None)
def reconcile_space(self, space_uid: str, resync: bool = False,
                    only_behind: bool = False) -> None:
    """Runs the space's agents; `only_behind`: only those that have not applied its last
    sequence (a resync that is no drift check). A transient failure retries the task after
    `retry_countdown`."""
    try:
        _reconcile_space(space_uid, resync, only_behind)
    except runner.TransientError as exc:
        countdown = retry_countdown(self.request.retries, exc.soon)
        logger.warning("agent.retry", extra={"space": space_uid, "error": str(exc),
                                             "retries": self.request.retries,
                                             "countdown": round(countdown, 3)})
        raise self.retry(exc=exc, countdown=countdown) from exc


# A router restarting is back within seconds (the embedded router reads its configuration
# journal in about a second per 100,000 addresses): its spaces' changes are retried every
# second or less for this many tries, not after Celery's doubling backoff, which left a change
# made during a one-second restart waiting up to eight seconds more.
QUICK_RETRIES = 16
BACKOFF_MAX = 60.0  # seconds: the longest wait between two tries


def retry_countdown(retries: int, soon: bool) -> float:
    """Seconds before try `retries + 1` of a reconcile: exponential backoff with full jitter
    (as Celery's retry_backoff), capped at BACKOFF_MAX; for a target expected back `soon`,
    0.25, 0.5, then 1 s (each less up to a quarter, so that retries spread) for QUICK_RETRIES
    tries first."""
    if soon and retries < QUICK_RETRIES:
        return min(1.0, 0.25 * 2 ** retries) * random.uniform(0.75, 1.0)
    if soon:
        retries -= QUICK_RETRIES
    return random.uniform(0, min(BACKOFF_MAX, 2.0 ** retries))


def _reconcile_space(space_uid: str, resync: bool, only_behind: bool) -> None:
    """The space's agents, unless another task runs the space now: then a note for that task
    (dispatch.leave_note), which queues one follow-up when it is done, and this task ends at
    once rather than hold a worker slot waiting (runner.space_turn)."""
    dispatch.claim(space_uid, resync=resync)  # before reading the space: see dispatch
    check = resync and not only_behind  # a drift check: every agent compares the whole space
    covered = {dispatch.CHANGE, dispatch.CHECK} if check else {dispatch.CHANGE}
    for attempt in (1, 2):
        with runner.space_turn(space_uid) as mine:
            if mine:
                # Notes left before this run reads the space: it does what they came for,
                # but a change run is no drift check, which is kept for after.
                after = dispatch.take_notes(space_uid) - covered
                try:
                    _run_space(space_uid, check, only_behind)
                except BaseException:
                    # Kept, with those left meanwhile, for whoever runs the space next: this
                    # task's retry, or a change or relayed re-send that finds the turn free
                    # before it. Queued now, each failing run with notes would start one
                    # more retry chain of the same space.
                    for note in after:
                        dispatch.leave_note(space_uid, check=note == dispatch.CHECK)
                    raise
                break
        if attempt == 1:
            # Noted before trying once more: the task with the turn takes the notes after it
            # has let go of it, so either it sees this note or this task gets the turn.
            dispatch.leave_note(space_uid, check=check)
    else:
        return
    after |= dispatch.take_notes(space_uid)  # left while this ran: one follow-up for them
    if dispatch.CHECK in after:
        dispatch.queue_reconcile(space_uid, resync=True)
    if dispatch.CHANGE in after:
        dispatch.queue_reconcile(space_uid)


def _run_space(space_uid: str, check: bool, only_behind: bool) -> None:
    # The router agent's pending events decide whether the agents may run at once: read with
    # the space, for the types whose spaces have more than one agent here.
    space = runner.space_to_run(space_uid, "router", tuple(
        t for t in SPACE_TYPES if len(agent_kinds(t)) > 1))
    kinds = agent_kinds(space.type) if space else list(runner.installed_agents())
    events = space.events if space else None
    if check or not _router_only(events):
        # In order: the broker's queues exist before the router's autoLinks attach to them,
        # and in a teardown the last agent done removes the space.
        for kind in kinds:
            runner.run(space_uid, kind, only_if_behind=only_behind, check=check)
        return
    # An agent these changes leave alone (the storage controller and new anycast addresses)
    # is recorded as having applied them, without a run of its own (`record_unaffected`).
    kinds = [kind for kind in kinds
             if not (runner.only_creates(events, runner.installed_agents()[kind].unaffected_types)
                     and runner.record_unaffected(space_uid, space.type, kind) is not None)]
    if len(kinds) == 1:
        runner.run(space_uid, kinds[0], only_if_behind=only_behind)
        return
    # Changes that need nothing of the broker first (anycast and multicast addresses, users):
    # the agents run at once (each has its own lock, target and state), so the address is
    # Active after the slower agent, not after both in turn.
    pool = process_pool("agent", 3)  # the most kinds a space needs: storage, router, infra
    runs = [pool.submit(_run_agent, space_uid, kind, only_behind) for kind in kinds]
    wait(runs)
    failures = [run.exception() for run in runs if run.exception() is not None]
    if failures:
        raise failures[0]  # a TransientError retries the space (the others' runs are idempotent)


def _router_only(events: list | None) -> bool:
    """Whether every event the router agent has not applied yet (`events`, from
    `pending_events`) creates an anycast or multicast address, deletes an address or changes a
    messaging user (no event: a resync, which keeps the order)."""
    if not events:
        return False
    for event_type, payload in events:
        if event_type.startswith("messaging_user.") or event_type == "address.deleted":
            continue  # a deletion needs no order: each agent removes its own objects
        if event_type == "address.created" and payload.get("type") in ROUTER_ONLY_TYPES:
            continue
        return False
    return True


def _run_agent(space_uid, kind: str, only_behind: bool) -> None:
    """One agent on a thread of the process's pool. The thread keeps its database connection
    from one change to the next as the task's own thread does (CONN_MAX_AGE, and dropped once
    broken): a connection per agent per change cost a PostgreSQL backend start each time, three
    per anycast create, about as much CPU as the reconcile itself."""
    close_old_connections()
    try:
        runner.run(space_uid, kind, only_if_behind=only_behind)
    finally:
        close_old_connections()


def agent_kinds(space_type: str) -> list[str]:
    """The agents this worker runs for a space of the type."""
    kinds = runner.installed_kinds(space_type)
    if space_type == "standard" and settings.MAAS_INFRA_BACKEND == "kubernetes":
        kinds = [k for k in kinds if k == "infra"]  # storage and router: the space's agent pod
    return kinds


@shared_task(name="maas.workers.relay_outbox")
def relay_outbox() -> int:
    """Re-sends the spaces whose events were not acknowledged in time (worker or Redis down, or
    an agent with something left to retry), with a back-off (`resend_due`)."""
    # Unacknowledged mostly means waiting behind a backlog: by the time the task runs, the
    # first one has usually applied the change, and a full diff again would be wasted (the end
    # of a 100k fill holds a couple of hundred such tasks, 1-3 s each). Agents still behind run
    # in full. Only what went out counts as sent: with Redis down the next tick tries again.
    spaces = [uid for uid in due_spaces(timezone.now())[:500]
              if notify_space(uid, only_behind=True)]
    if spaces:
        # Every unacknowledged row of a space went out again with the task: they all take the
        # space's count of re-sends plus one.
        with connection.cursor() as cursor:
            cursor.execute(_RESENT, [timezone.now(), [str(uid) for uid in spaces]])
        logger.info("outbox.relayed", extra={"spaces": len(spaces)})
    return len(spaces)


_RESENT = f"""
UPDATE {Outbox._meta.db_table} AS pending SET attempts = sent.most + 1, last_sent_at = %s
FROM (SELECT stream_uid, max(attempts) AS most FROM {Outbox._meta.db_table}
      WHERE acked_at IS NULL AND stream_uid = ANY(%s::uuid[]) GROUP BY stream_uid) AS sent
WHERE pending.stream_uid = sent.stream_uid AND pending.acked_at IS NULL"""


def due_spaces(now):
    """The spaces with unacknowledged events due a re-send, longest waiting first. A space was
    last sent when the relay last re-sent it or a change to it was written since (its own
    notification asked the agents for the whole space as a re-send does); it is due once that
    is longer ago than `resend_due` allows for its count of re-sends."""
    return (Outbox.objects.filter(acked_at__isnull=True).values("stream_uid")
            .annotate(sent=Max(Coalesce("last_sent_at", "created_at")), count=Max("attempts"))
            .filter(resend_due(now)).order_by("sent").values_list("stream_uid", flat=True))


def resend_due(now) -> Q:
    """Whether a space (`due_spaces`' `sent` and `count`) is due: `MAAS_RELAY_AFTER_SECONDS`
    after it was last sent, doubled with each re-send (10, 20, 40 ... s), up to
    `MAAS_RELAY_MAX_BACKOFF_SECONDS`. A space whose agent keeps failing on a change (a broker
    that keeps refusing a queue) then costs a full reconcile every few minutes, not every 10 s
    for ever, and a space waiting minutes behind a backlog (a 100k fill) has its rows rewritten
    a handful of times, not every 10 s (1.56 million row updates during one such fill)."""
    after = settings.MAAS_RELAY_AFTER_SECONDS
    longest = max(after, settings.MAAS_RELAY_MAX_BACKOFF_SECONDS)
    due, count = Q(), 0
    while 0 < after < longest:  # a term per doubling (a handful), then the longest wait
        due |= Q(count=count, sent__lt=now - timedelta(seconds=after))
        after, count = after * 2, count + 1
    return due | Q(count__gte=count, sent__lt=now - timedelta(seconds=min(after, longest)))


@shared_task(name="maas.workers.resync_all")
def resync_all() -> int:
    """Level-triggered repair, in the resync queue: the spaces whose agents are behind, and a
    share of all spaces, those compared whole longest ago (drift, restarted brokers)."""
    if settings.MAAS_AGENT_MODE == "process":
        return 0  # each run_agent process resyncs its own space on a timer
    behind, drifting = resync_candidates(timezone.now())
    # A space both behind and due its drift check is queued once, as the check (which runs
    # every agent, those behind too), and at once, as a repair is.
    checks, repairs = set(drifting), set(behind)
    for uid in behind:
        if uid not in checks:
            dispatch.queue_reconcile(uid, resync=True, only_behind=True)
    for uid, countdown in zip(drifting, drift_check_countdowns(len(drifting)), strict=True):
        dispatch.queue_reconcile(uid, resync=True, countdown=0.0 if uid in repairs else countdown)
    logger.info("resync.queued", extra={"behind": len(behind), "drift_checks": len(drifting)})
    return len(repairs | checks)


def drift_check_countdowns(n: int) -> list[float]:
    """When each of a tick's n drift checks is due, in seconds from now: spread evenly over the
    resync interval. Queued at once, two checks ran at a time for half of every minute at 100k
    on two cores, and the API's creates waited for a CPU behind them and the broker listings
    they asked for; spread, where they fit in the interval, about one runs at a time. Where
    they do not fit (a slower machine), they run back to back either way (docs/scale.md,
    "Drift checks spread over the minute")."""
    # Within half Redis's visibility timeout too: a task not acknowledged by then is delivered
    # again, and a waiting countdown is not acknowledged (a resync interval of minutes).
    span = min(settings.MAAS_RESYNC_INTERVAL,
               settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("visibility_timeout", 3600) / 2)
    return [round(i * span / n, 3) for i in range(n)]


def resync_candidates(now) -> tuple[list, list]:
    """(spaces some agent has not applied yet or has to retry, spaces due a drift check: the
    share of the tick, compared whole longest ago, behind or not), from two queries."""
    applied = _applied_by_space()
    kinds = {space_type: agent_kinds(space_type) for space_type in SPACE_TYPES}
    # A live router watch restores invalidated states itself: queueing them here too would
    # double the router's load just when it is busiest.
    watched = router_watch.alive(now)
    behind, due = [], []
    spaces = list(AddressSpace.objects.values_list("uid", "type", "last_sequence"))
    for uid, space_type, last_sequence in spaces:
        by_kind = {k: applied.get(uid, {}).get(k) for k in kinds.get(space_type, ())}
        states = list(by_kind.values())
        if any(s is None for s in states):
            behind.append(uid)  # an agent never ran
            continue
        invalidated = [k for k, s in by_kind.items() if s[2]]
        if any(s[0] < last_sequence or s[1] is None for s in states):
            behind.append(uid)
        elif any(k != router_watch.KIND for k in invalidated):
            behind.append(uid)  # e.g. its broker restarted (storage.broker_watch)
        elif invalidated:
            if not watched:
                behind.append(uid)  # its router restarted and no watch restores it
        elif any(s[3] for s in states):
            # An address error to retry (an autoLink not active yet, a queue not verified):
            # the next tick tries again, rather than the space's drift check minutes later.
            behind.append(uid)
        # Every space's drift check comes round, whatever else it waits for: the error it
        # retries, or the change a busy space has pending at every tick, may be one only the
        # check mends, in an agent that is not behind. A router login replaced because it no
        # longer decrypted (SECRET_KEY lost) keeps the router's autoLinks in error until the
        # storage controller, which applied every event, gives RabbitMQ that login
        # (tests/workers/test_credential_rotation.py); left out of the drift checks, such
        # spaces would stay in error. Not while an agent's target lost what it applied: that
        # restore comes first.
        if states and not invalidated:
            due.append((_checked(by_kind), uid))
    fresh = now - timedelta(seconds=settings.MAAS_RESYNC_INTERVAL)
    share = math.ceil(len(spaces) / drift_check_ticks())
    return behind, [uid for at, uid in sorted(due) if at < fresh][:share]


def _checked(by_kind: dict):
    """When the space was last compared whole with every target (`AgentState.checked_at`):
    the earliest of its agents', never being earliest of all. Not when it last applied a
    change: the short paths (new addresses alone) apply most changes of a busy space, and
    check nothing else of it."""
    never = datetime.min.replace(tzinfo=UTC)
    return min((state[4] or never) for state in by_kind.values())


# Whether an agent state holds an address error not marked permanent (runner._settled's test,
# in SQL: the errors themselves, thousands during a fill, are not loaded).
_RETRYABLE = RawSQL(statements.RETRYABLE_ERRORS.format(
    column=f'"{AgentState._meta.db_table}"."address_errors"'), [], output_field=BooleanField())


def _applied_by_space() -> dict:
    """{space uid: {agent kind: (applied sequence, applied at, invalidated, an address error
    to retry, checked at)}} of the existing spaces."""
    applied: dict = {}
    states = AgentState.objects.filter(space_uid__in=AddressSpace.objects.values("uid"))
    for uid, kind, sequence, at, invalidated, retry, checked in states.annotate(
            retry=_RETRYABLE).values_list("space_uid", "kind", "applied_sequence", "applied_at",
                                          "invalidated", "retry", "checked_at"):
        applied.setdefault(uid, {})[kind] = (sequence, at, invalidated, retry, checked)
    return applied


@shared_task(name="maas.workers.watch_router")
def watch_router() -> dict:
    """Notices a router that restarted empty and restores its spaces first (router_watch).

    Why a beat task in a queue of its own, served by a worker of its own (`runplatform`): beat
    is already the platform's one clock, so there is one watcher however many workers run; a
    tick never waits behind changes, resyncs or usage jobs; and the restores run inside the
    tick with bounded concurrency, so they wait behind no queued change either. Ticks expire
    after one interval: those that queued up during a long restore are dropped, not run."""
    if not settings.MAAS_ROUTER_ENABLED or settings.MAAS_INFRA_BACKEND == "kubernetes":
        return {}  # on Kubernetes each space's agent pod resyncs its own router
    return vars(router_watch.tick(*(r.management_url for r in endpoints.shared_routers())))


@shared_task(name="maas.workers.read_router_tables")
def read_router_tables() -> dict:
    """Reads a router shared by spaces (qdrouterd on one machine) whole, when due, and keeps
    its tables in Redis for every space's full diff (workers/agents/router/tables.py): one
    read for the platform, in the background worker, where it holds no space's turn and waits
    behind no change (in the usage queue: in the resync queue a full resync's drift checks
    held it until it expired)."""
    if not settings.MAAS_ROUTER_ENABLED or settings.MAAS_INFRA_BACKEND == "kubernetes":
        return {}  # on Kubernetes each space has a router of its own: nothing is shared
    read, routers = {}, endpoints.shared_routers()
    for router in routers:  # each router of a mesh holds its own tables
        try:
            mgmt = management_client(router)
        except RouterUnreachable:
            continue  # the router watch tells when it is back
        try:
            kept = router_tables.refresh(mgmt)
        finally:
            mgmt.close()
        if kept is not None:
            read[router.name] = {"seconds": round(kept.seconds, 3), "rows": mgmt.rows_read}
    if len(routers) == 1:  # its figures alone; a mesh's by router
        return read.get(routers[0].name, {})
    return read


@shared_task(name="maas.workers.watch_broker")
def watch_broker() -> dict:
    """Notices a shared broker that restarted (its transient exchanges gone) and queues the
    repair of its spaces (workers/agents/storage/watch.py); in the router watch's queue, for
    the same reasons."""
    from workers.agents.storage import watch as broker_watch

    return vars(broker_watch.tick())


@shared_task(name="maas.workers.sample_usage")
def sample_usage() -> int:
    from workers.usage.sampler import sample

    return sample()


@shared_task(name="maas.workers.run_usage_job", bind=True, max_retries=3)
def run_usage_job(self, day: str | None = None) -> str:
    """The rollup of `day` ("YYYY-MM-DD", "today", or yesterday by default); retried with
    backoff; every run is recorded as a UsageJobRun. Spark's JVM ends with each run."""
    import datetime

    from workers.usage.job import run_day

    today = datetime.datetime.now(datetime.UTC).date()
    if day == "today":
        when = today
    else:
        when = datetime.date.fromisoformat(day) if day else today - datetime.timedelta(days=1)
    try:
        run = run_day(when)
        return run.status if run is not None else "skipped"  # another run is under way
    except Exception as exc:
        raise self.retry(exc=exc, countdown=300 * (self.request.retries + 1)) from exc
    finally:
        # The worker lives on between hourly runs: its idle driver JVM held 2.3 GiB.
        from spark.session import release_session

        try:
            release_session()
        except Exception:  # the run's own outcome stands; the next run starts a new JVM
            logger.warning("usage.spark_release_failed", exc_info=True)


@shared_task(name="maas.workers.evaluate_quota", acks_late=True)
def evaluate_quota(tenant_id: int) -> dict:
    """Re-evaluates one tenant's quota on today's usage so far, without Spark, and throttles or
    releases it at once (workers/usage/live_quota.py); queued after a quota change."""
    from workers.usage.live_quota import evaluate

    return evaluate(tenant_id)
