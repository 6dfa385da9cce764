"""The contract of an agent and the runner that serialises, records and acknowledges its work.

An agent brings its target (a broker vhost, a router) to the desired state of one address
space as the projections hold it now: query actual, diff, apply, verify. Because it works from
the whole desired state, duplicate or reordered deliveries are harmless. The runner holds an
advisory lock per (space, agent kind), so one space is reconciled by one agent at a time, talks
to the target with no database transaction open, then records the sequence applied, the
per-address errors and the latency of each event in one short transaction.
"""
import hashlib
import logging
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Min, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from config_service import services
from config_service.models import AddressSpace, AgentState, AppliedEvent, ConfigEvent, Outbox
from config_service.status import agents_needed

logger = logging.getLogger(__name__)


class TransientError(Exception):
    """The target is unreachable or busy: retry later with backoff; nothing is recorded."""


@dataclass
class Report:
    """The outcome of one reconcile: per-address errors and a space-level error, if any."""

    address_errors: dict = field(default_factory=dict)  # name -> {"message", "permanent"}
    space_error: str = ""


class Agent:
    kind = ""

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
        only_if_behind: bool = False) -> int | None:
    """Reconciles one space with one agent; returns the sequence applied (None: space gone).

    `only_if_behind`: nothing to do if the agent already applied the space's last sequence and
    has nothing to retry (`_settled`).
    Not for wake-ups: a tenant throttle or an operator's resync changes no sequence.

    Serialised per (space, kind) by a PostgreSQL advisory lock, held on this process's
    connection outside any transaction: the desired state is read, the target is talked to
    (seconds, at times) and the outcome is recorded in a short transaction of its own, so no
    database connection sits idle in a transaction, and no row lock is held, while the agent
    waits on a broker or a router."""
    agent = agent or installed_agents()[kind]
    with serialised(space_uid, kind):
        started = timezone.now()
        space = AddressSpace.objects.select_related("tenant").filter(uid=space_uid).first()
        if space is None:
            _ack_outbox(space_uid, None)
            return None
        if kind not in agents_needed(space.type):
            return None
        target = space.last_sequence  # read before the agent reads the projections: it
        # then applies this sequence or a later one, never an earlier one
        # The row exists before the agent talks to its target: a router restart meanwhile
        # invalidates it, and _record keeps that invalidation (router_watch).
        state, _ = AgentState.objects.get_or_create(space_uid=space_uid, kind=kind)
        if only_if_behind and state.applied_sequence >= target and not space.terminating \
                and _settled(state):
            # Applied, though perhaps never acknowledged: two agents recording at once each
            # see the other's older sequence, and the outbox relay would re-send for ever.
            _ack_outbox(space_uid, space)
            return target
        if space.terminating:
            try:
                agent.teardown(space)
            except TransientError as exc:
                # Keep the space (Terminating, with the reason in its status) and retry: it is
                # removed only once every agent has really torn its objects down.
                error = f"Cleaning up failed, retrying: {exc}"[:500]
                AgentState.objects.filter(pk=state.pk).update(space_error=error, torn_down=False)
                logger.warning("agent.teardown_failed", extra={
                    "space": str(space_uid), "agent": kind, "tenant": space.tenant.slug,
                    "vhost": space.vhost, "error": error})
                raise TransientError(error) from exc
            report = Report()
        else:
            report = agent.reconcile(space)
        _record(space, kind, target, report, started)
    logger.info("agent.applied", extra={"space": str(space_uid), "agent": kind,
                                        "tenant": space.tenant.slug, "sequence": target})
    if space.terminating and _all_torn_down(space):
        services.remove_address_space(uid=space.uid)
    return target


def _settled(state: AgentState) -> bool:
    """Nothing left to retry in what the agent applied: not invalidated, and every error it
    reported permanent (an autoLink not active yet, a configuration not yet verified, are
    retried by the next run, a relayed one included)."""
    return not state.invalidated and not state.space_error and all(
        error.get("permanent") for error in state.address_errors.values())


def invalidate(kind: str, states, reason: str) -> int:
    """Marks agent states of `kind` (a queryset) not applied because their target lost what
    was applied (a router or broker restarted), with `reason` for the status; how many were
    applied. Already invalidated states get the new time too: a reconcile that was running
    when the target restarted again must not clear them when it records its outcome."""
    count = states.filter(invalidated="").count()
    states.update(invalidated=reason, invalidated_at=timezone.now())
    if count and settings.MAAS_AGENT_MODE == "process":
        from ..wakeup import publish  # each space's run_agent reconciles its own

        for uid in invalidated_spaces(kind):
            publish(uid)
    return count


def invalidated_spaces(kind: str) -> list:
    """The existing spaces whose `kind` state is invalidated, those applied longest ago first."""
    return list(AgentState.objects.filter(
        kind=kind, space_uid__in=AddressSpace.objects.values("uid"),
    ).exclude(invalidated="").order_by("applied_at").values_list("space_uid", flat=True))


def pending_events(space_uid, kind: str, limit: int = 100) -> list[tuple[str, dict]] | None:
    """(type, payload) of the space's events the agent kind has not applied yet, oldest
    first; None if there are more than `limit` (a big batch: no shortcut is worth it)."""
    applied = AgentState.objects.filter(space_uid=space_uid, kind=kind).values(
        "applied_sequence")[:1]
    events = list(ConfigEvent.objects.filter(
        stream_id=space_uid, sequence__gt=Coalesce(Subquery(applied), 0),
    ).order_by("sequence").values_list("type", "payload")[:limit + 1])
    return None if len(events) > limit else events


@contextmanager
def serialised(space_uid, kind: str):
    """One reconcile per (space, agent kind) at a time, in every process: a session-level
    advisory lock, released when this block ends or the process's connection drops (a killed
    worker holds nothing)."""
    digest = hashlib.blake2b(f"{space_uid}:{kind}".encode(), digest_size=8).digest()
    key = int.from_bytes(digest, "big", signed=True)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [key])
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [key])


def _record(space: AddressSpace, kind: str, target: int, report: Report, started) -> None:
    """The outcome of one reconcile, in one short transaction: sequence applied (never moved
    backwards), errors, an AppliedEvent per newly covered event, acknowledged outbox rows."""
    now = timezone.now()
    with transaction.atomic():
        state = AgentState.objects.select_for_update().get(space_uid=space.uid, kind=kind)
        if space.terminating:
            state.torn_down = True
        state.address_errors, state.space_error = report.address_errors, report.space_error
        _record_applied(space.uid, kind, state.applied_sequence, target, now)
        state.applied_sequence = max(state.applied_sequence, target)
        state.applied_at = now
        # An invalidation (its router restarted empty) from before this reconcile started is
        # repaired by it; one that came while it ran may have wiped what it applied: kept.
        if state.invalidated_at is None or state.invalidated_at < started:
            state.invalidated, state.invalidated_at = "", None
        state.save()
        _ack_outbox(space.uid, space)


def _record_applied(space_uid, kind, after: int, upto: int, now) -> None:
    """An AppliedEvent for each event in (after, upto], with its latency: one statement."""
    applied, events = AppliedEvent._meta.db_table, ConfigEvent._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {applied} (event_id, kind, applied_at, latency_seconds)"
            f" SELECT position, %s, %s, EXTRACT(EPOCH FROM %s - created_at)::float8"
            f" FROM {events} WHERE stream_id = %s AND sequence > %s AND sequence <= %s"
            " ON CONFLICT DO NOTHING", [kind, now, now, space_uid, after, upto])


def _ack_outbox(space_uid, space: AddressSpace | None) -> None:
    """Marks outbox rows done once every installed agent of the space has applied them."""
    pending = Outbox.objects.filter(stream_uid=space_uid, acked_at__isnull=True)
    if space is not None:
        kinds = installed_kinds(space.type)
        if not kinds:
            return
        # Up to the lowest sequence its agents applied; none while one of them has no state
        # yet (no row: the subquery is NULL and nothing compares below it). One statement.
        upto = (AgentState.objects.filter(space_uid=space_uid, kind__in=kinds)
                .values("space_uid").annotate(upto=Min("applied_sequence"), kinds=Count("kind"))
                .filter(kinds=len(set(kinds))).values("upto"))
        pending = pending.filter(sequence__lte=Subquery(upto))
    pending.update(acked_at=timezone.now())


def _all_torn_down(space: AddressSpace) -> bool:
    kinds = installed_kinds(space.type)
    done = AgentState.objects.filter(space_uid=space.uid, kind__in=kinds, torn_down=True).count()
    return done == len(kinds)
