"""The contract of an agent and the runner that serialises, records and acknowledges its work.

An agent brings its target (a broker vhost, a router) to the desired state of one address
space as the projections hold it now: query actual, diff, apply, verify. Because it works from
the whole desired state, duplicate or reordered deliveries are harmless. The runner holds an
advisory lock per (space, agent kind), so one space is reconciled by one agent at a time, talks
to the target with no database transaction open, then records the sequence applied, the
per-address errors and the latency of each event in one statement.
"""
import hashlib
import json
import logging
import time
from collections.abc import Callable
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection
from django.db.models import Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from config_service import services
from config_service.models import AddressSpace, AgentState
from config_service.status import agents_needed
from core.locks import advisory_lock
from eventlog.models import ConfigEvent, Outbox
from workers import dispatch
from workers.agents import statements

logger = logging.getLogger(__name__)


class TransientError(Exception):
    """The target is unreachable or busy: retry later with backoff; nothing is recorded.
    `soon`: the target is a process expected back within seconds (a router restarting), so
    the first retries come quickly (workers.tasks.retry_countdown)."""

    def __init__(self, message: str = "", soon: bool = False):
        super().__init__(message)
        self.soon = soon


@dataclass
class Report:
    """The outcome of one reconcile: per-address errors and a space-level error, if any."""

    address_errors: dict = field(default_factory=dict)  # name -> {"message", "permanent"}
    space_error: str = ""
    # The whole space was compared with the target (`AgentState.checked_at`); False for a
    # short path that looked at the new addresses alone, or a run that compared nothing.
    checked: bool = True
    # Where the run's time went, in ms by step (the router agent: its connection's opening
    # and its requests by kind), logged with `agent.applied`.
    timings: dict = field(default_factory=dict)


class Agent:
    kind = ""
    # Address types whose creation leaves this agent's target as it is: a space's events that
    # only create such addresses are recorded as applied without running it (`record_unaffected`).
    unaffected_types: tuple[str, ...] = ()

    def reconcile(self, space: AddressSpace) -> Report:  # pragma: no cover - interface
        raise NotImplementedError

    def teardown(self, space: AddressSpace) -> None:  # pragma: no cover - interface
        raise NotImplementedError


_installed: Callable[[], dict[str, Agent]] | None = None


def install(factory: Callable[[], dict[str, Agent]]) -> None:
    """Registers what builds the installed agents by kind (workers/apps.py, at start-up, with
    `workers.agents.installed.installed_agents`): the agents import this contract, so it
    cannot import them."""
    global _installed
    _installed = factory


def installed_agents() -> dict[str, Agent]:
    if _installed is None:
        raise RuntimeError("no agents installed: the workers app registers them at start-up")
    return _installed()


def installed_kinds(space_type: str) -> list[str]:
    installed = installed_agents()
    return [k for k in agents_needed(space_type) if k in installed]


def run(space_uid, kind: str, agent: Agent | None = None, *,
        only_if_behind: bool = False, check: bool = False) -> int | None:
    """Reconciles one space with one agent; returns the sequence applied (None: space gone).

    `only_if_behind`: nothing to do if the agent already applied the space's last sequence and
    has nothing to retry (`_settled`). `check`: a drift check, which compares the whole space
    with the target whatever changes are pending (`drift_check`).
    Not for wake-ups: a tenant throttle or an operator's resync changes no sequence.

    Serialised per (space, kind) by a PostgreSQL advisory lock, held on this process's
    connection outside any transaction: the desired state is read, the target is talked to
    (seconds, at times) and the outcome is recorded in one statement of its own, so no
    database connection sits idle in a transaction, and no row lock is held, while the agent
    waits on a broker or a router."""
    agent = agent or installed_agents()[kind]
    asked = time.monotonic()
    with serialised(space_uid, kind):
        locked = time.monotonic()
        started = timezone.now()
        # The space, the state and the events not applied, in one snapshot: the events end
        # at the space's last sequence (a drift check takes no shortcut, so reads none).
        read = statements.run_start(space_uid, kind, with_events=not check,
                                    limit=PENDING_LIMIT + 1)
        if read is None:
            _ack_outbox(space_uid, None)
            return None
        space, state, events = read
        if kind not in agents_needed(space.type):
            return None
        target = space.last_sequence  # read before the agent reads the projections: it
        # then applies this sequence or a later one, never an earlier one
        if state is None:
            # The row exists before the agent talks to its target: a router restart meanwhile
            # invalidates it, and _record keeps that invalidation (router_watch). (The events
            # were read after sequence 0, which is the new state's.)
            state, _ = AgentState.objects.get_or_create(space_uid=space_uid, kind=kind)
        if _done(space, state, target, only_if_behind):
            return target
        ran = _run.set(_Run(space.uid, kind, state, check,
                            _UNREAD if events is None
                            else None if len(events) > PENDING_LIMIT else events))
        try:
            report = _reconcile_or_teardown(agent, space, state, kind)
        finally:
            _run.reset(ran)
        _record(space, kind, target, report, started)
    if any(not error.get("permanent") for error in report.address_errors.values()):
        dispatch.queue_follow_up(space_uid, kind)
    # Where a change's time went (tests/bench/bench_scale.py reads these): waiting for the
    # space's turn, then the run; `whole` is a full diff, not only the new entities.
    logger.info("agent.applied", extra={
        "space": str(space_uid), "agent": kind, "tenant": space.tenant.slug, "sequence": target,
        "began": round(started.timestamp(), 3), "lock_ms": round((locked - asked) * 1000),
        "run_ms": round((time.monotonic() - locked) * 1000), "whole": report.checked,
        **({"timings": report.timings} if report.timings else {})})
    if space.terminating and _all_torn_down(space):
        services.remove_address_space(uid=space.uid)
    return target


def record_unaffected(space_uid, space_type: str, kind: str) -> int | None:
    """Records the agent `kind` as having applied the space's events up to its last sequence
    without running it, when each event it has not applied creates an address of its
    `unaffected_types` (the storage controller and an anycast address: nothing of the broker
    changes) and its last run left nothing to repair: it ran before, is not invalidated, and the
    space is not being deleted. Its errors stay as they were, as the run would have reported
    them again (`nothing_to_store`), and the outbox is acknowledged as `_record` does.

    One statement under the agent's lock, where a run took four (the space, its state, its
    events, the record), the Python to build them and a thread of the pool. Returns the
    sequence recorded, or None: nothing was recorded, and the agent is to run."""
    types = installed_agents()[kind].unaffected_types
    if not types:
        return None
    kinds = installed_kinds(space_type)
    with serialised(space_uid, kind):
        with connection.cursor() as cursor:
            cursor.execute(statements.UNAFFECTED_SQL, {
                "uid": space_uid, "kind": kind, "types": list(types), "now": timezone.now(),
                "kinds": kinds, "nkinds": len(set(kinds))})
            row = cursor.fetchone()
    if row is None:
        return None
    logger.info("agent.applied", extra={"space": str(space_uid), "agent": kind,
                                        "sequence": row[0], "unaffected": True})
    return row[0]


def _done(space: AddressSpace, state: AgentState, target: int, only_if_behind: bool) -> bool:
    """Whether an `only_if_behind` run has nothing to do (and acknowledges what it applied)."""
    if only_if_behind and state.applied_sequence >= target and not space.terminating \
            and _settled(state):
        # Applied, though perhaps never acknowledged: two agents recording at once each see
        # the other's older sequence, and the outbox relay would re-send for ever.
        _ack_outbox(space.uid, space)
        return True
    return False


def _reconcile_or_teardown(agent: Agent, space: AddressSpace, state: AgentState,
                           kind: str) -> Report:
    if not space.terminating:
        return agent.reconcile(space)
    try:
        agent.teardown(space)
    except TransientError as exc:
        # Keep the space (Terminating, with the reason in its status) and retry: it is
        # removed only once every agent has really torn its objects down.
        error = f"Cleaning up failed, retrying: {exc}"[:500]
        AgentState.objects.filter(pk=state.pk).update(space_error=error, torn_down=False)
        logger.warning("agent.teardown_failed", extra={
            "space": str(space.uid), "agent": kind, "tenant": space.tenant.slug,
            "vhost": space.vhost, "error": error})
        raise TransientError(error, soon=exc.soon) from exc
    return Report()


def _settled(state: AgentState) -> bool:
    """Nothing left to retry in what the agent applied: not invalidated, and every error it
    reported permanent (an autoLink not active yet, a configuration not yet verified, are
    retried by the next run, a relayed one included). The same test in SQL: `_ACK`, with
    `statements.RETRYABLE_ERRORS`."""
    return not state.invalidated and _clean(state.address_errors, state.space_error)


def _clean(address_errors: dict, space_error: str) -> bool:
    """No space error, and every address error permanent."""
    return not space_error and all(error.get("permanent") for error in address_errors.values())


def invalidate(kind: str, states, reason: str) -> int:
    """Marks agent states of `kind` (a queryset) not applied because their target lost what
    was applied (a router or broker restarted), with `reason` for the status; how many were
    applied. Already invalidated states get the new time too: a reconcile that was running
    when the target restarted again must not clear them when it records its outcome."""
    count = states.filter(invalidated="").count()
    states.update(invalidated=reason, invalidated_at=timezone.now())
    if count and settings.MAAS_AGENT_MODE == "process":
        from workers.wakeup import publish  # each space's run_agent reconciles its own

        for uid in invalidated_spaces(kind):
            publish(uid)
    return count


def invalidated_spaces(kind: str) -> list:
    """The existing spaces whose `kind` state is invalidated, those applied longest ago first."""
    return list(AgentState.objects.filter(
        kind=kind, space_uid__in=AddressSpace.objects.values("uid"),
    ).exclude(invalidated="").order_by("applied_at").values_list("space_uid", flat=True))


PENDING_LIMIT = 100  # events past which `pending_events` answers None


def pending_events(space_uid, kind: str,
                   limit: int = PENDING_LIMIT) -> list[tuple[str, dict]] | None:
    """(type, payload) of the space's events the agent kind has not applied yet, oldest
    first; None if there are more than `limit` (a big batch: no shortcut is worth it).
    Within the agent's own run (`run`), those the run read with the space and the state, up
    to the space's last sequence as the run read it; None in a drift check, which takes no
    shortcut either."""
    current = _run.get(None)
    if current is not None and current.key == (str(space_uid), kind) and limit == PENDING_LIMIT:
        if current.check:
            return None
        if current.events is _UNREAD:
            current.events = _events_after(space_uid, current.state.applied_sequence, limit)
        return current.events
    applied = AgentState.objects.filter(space_uid=space_uid, kind=kind).values(
        "applied_sequence")[:1]
    return _events_after(space_uid, Coalesce(Subquery(applied), 0), limit)


def drift_check() -> bool:
    """Whether the agent's run is a drift check (`run`'s `check`)."""
    current = _run.get(None)
    return current is not None and current.check


def only_creates(events: list | None, address_types) -> bool:
    """Whether there are `events` (from `pending_events`) and each creates an address of one
    of `address_types`: what an agent's short path, or not running it at all, rests on."""
    return bool(events) and all(t == "address.created" and p.get("type") in address_types
                                for t, p in events)


def _events_after(space_uid, sequence, limit: int) -> list[tuple[str, dict]] | None:
    events = list(ConfigEvent.objects.filter(stream_id=space_uid, sequence__gt=sequence)
                  .order_by("sequence").values_list("type", "payload")[:limit + 1])
    return None if len(events) > limit else events


@dataclass
class SpaceToRun:
    """What a reconcile task reads of a space before running its agents (`space_to_run`)."""

    type: str
    terminating: bool
    events: list[tuple[str, dict]] | None  # `pending_events` of the kind asked, if asked


def space_to_run(space_uid, kind: str, events_for: tuple[str, ...]) -> SpaceToRun | None:
    """The space's type, whether it is terminating and, for a space of a type in `events_for`
    that is not, the events the agent `kind` has not applied (as `pending_events` outside a run
    gives them): one statement, where the ORM took two and compiled a subquery for the second
    (a few ms of a create's CPU). None: no such space."""
    with connection.cursor() as cursor:
        cursor.execute(statements.SPACE_TO_RUN_SQL, {"uid": space_uid, "kind": kind,
                                           "types": list(events_for),
                                           "limit": PENDING_LIMIT + 1})
        row = cursor.fetchone()
    if row is None:
        return None
    space_type, terminating, asked, events = row
    if not asked:
        return SpaceToRun(space_type, terminating, None)
    events = [(t, p) for t, p in events or []]
    return SpaceToRun(space_type, terminating, None if len(events) > PENDING_LIMIT else events)


def agent_state(space_uid, kind: str) -> AgentState | None:
    """The agent kind's state of the space: within the agent's own run, the one the run read
    under its lock (nothing else moves its sequence meanwhile: only this kind's runs record,
    one at a time), else read now."""
    current = _run.get(None)
    if current is not None and current.key == (str(space_uid), kind):
        return current.state
    return AgentState.objects.filter(space_uid=space_uid, kind=kind).first()


_UNREAD = object()


class _Run:
    """What `run` read of the space for the agent it runs (its state, and the events it has
    not applied), so that the agent does not read them again."""

    def __init__(self, space_uid, kind: str, state: AgentState, check: bool = False,
                 events=_UNREAD):
        self.key = (str(space_uid), kind)
        self.state = state
        self.events = events
        self.check = check


_run: ContextVar[_Run] = ContextVar("agent_run")


def _lock_key(name: str) -> int:
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@contextmanager
def space_turn(space_uid):
    """Whether this reconcile task has the space's turn (True) or another task runs it now
    (False), without waiting: a session-level advisory try-lock of the space, held for the
    block, released when it ends or the process's connection drops. A task that waited for
    the space's agent locks instead held a worker slot meanwhile, so a burst of changes to one
    slow space could take every slot of the agents' worker while the other spaces' changes
    waited for one (workers/tasks.py, `_reconcile_space`)."""
    key = _lock_key(f"{space_uid}:turn")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        mine = cursor.fetchone()[0]
    try:
        yield mine
    finally:
        if mine:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [key])


@contextmanager
def serialised(space_uid, kind: str):
    """One reconcile per (space, agent kind) at a time, in every process: a session-level
    advisory lock, released when this block ends or the process's connection drops (a killed
    worker holds nothing)."""
    with advisory_lock(_lock_key(f"{space_uid}:{kind}")):
        yield


def _record(space: AddressSpace, kind: str, target: int, report: Report, started) -> None:
    """The outcome of one reconcile, in one statement: sequence applied (never moved
    backwards), errors, an AppliedEvent per newly covered event with its latency, and the
    outbox rows acknowledged that every installed agent of the space has now applied cleanly
    (statements.ACK_SQL).

    One statement, not a transaction of six round trips (lock the state, insert, update,
    acknowledge): at 20 creates a second that was two to three of them per change, with their
    CPU in this process and in PostgreSQL. The state's row is locked first (FOR UPDATE), so two
    records of one agent kind never interleave; an invalidation (its router restarted empty)
    from before this reconcile started is repaired by it, one that came while it ran may have
    wiped what it applied and is kept (router_watch)."""
    settled = _clean(report.address_errors, report.space_error)
    with connection.cursor() as cursor:
        cursor.execute(statements.RECORD_SQL, {
            **_ack_params(space, kind, target, settled, started),
            "errors": json.dumps(report.address_errors), "space_error": report.space_error,
            "terminating": space.terminating, "checked": report.checked,
        })


def _ack_outbox(space_uid, space: AddressSpace | None) -> None:
    """Acknowledges the outbox rows every installed agent of the space has applied cleanly
    (statements.ACK_SQL); all of them once the space is gone."""
    if space is None:
        Outbox.objects.filter(stream_uid=space_uid, acked_at__isnull=True).update(
            acked_at=timezone.now())
        return
    with connection.cursor() as cursor:
        cursor.execute(statements.ACK_SQL, _ack_params(space, "", 0, True, None))


def _ack_params(space: AddressSpace, kind: str, target: int, settled: bool, started) -> dict:
    kinds = installed_kinds(space.type)
    return {"uid": space.uid, "kind": kind, "target": target, "settled": settled,
            "started": started, "now": timezone.now(), "kinds": kinds,
            "nkinds": len(set(kinds))}


def _all_torn_down(space: AddressSpace) -> bool:
    kinds = installed_kinds(space.type)
    done = AgentState.objects.filter(space_uid=space.uid, kind__in=kinds, torn_down=True).count()
    return done == len(kinds)
