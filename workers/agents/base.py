"""The contract of an agent and the runner that serialises, records and acknowledges its work.

An agent brings its target (a broker vhost, a router) to the desired state of one address
space as the projections hold it now: query actual, diff, apply, verify. Because it works from
the whole desired state, duplicate or reordered deliveries are harmless. The runner holds a
row lock per (space, agent kind), so one space is reconciled by one agent at a time, and records
the sequence applied, the per-address errors and the latency of each event in the same
transaction.
"""
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from config_service import services
from config_service.models import AddressSpace, AgentState, AppliedEvent, ConfigEvent, Outbox
from config_service.status import AGENTS_BY_SPACE_TYPE

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
    return [k for k in AGENTS_BY_SPACE_TYPE.get(space_type, ()) if k in installed]


def run(space_uid, kind: str, agent: Agent | None = None, *,
        only_if_behind: bool = False) -> int | None:
    """Reconciles one space with one agent; returns the sequence applied (None: space gone).

    `only_if_behind`: nothing to do if the agent already applied the space's last sequence.
    Not for wake-ups: a tenant throttle or an operator's resync changes no sequence."""
    agent = agent or installed_agents()[kind]
    AgentState.objects.get_or_create(space_uid=space_uid, kind=kind)
    with transaction.atomic():
        state = AgentState.objects.select_for_update().get(space_uid=space_uid, kind=kind)
        space = AddressSpace.objects.select_related("tenant").filter(uid=space_uid).first()
        if space is None:
            _ack_outbox(space_uid, None)
            return None
        if kind not in AGENTS_BY_SPACE_TYPE[space.type]:
            return None
        target, teardown_error = space.last_sequence, ""
        if only_if_behind and state.applied_sequence >= target and not space.terminating:
            return target
        if space.terminating:
            try:
                agent.teardown(space)
            except TransientError as exc:
                # Keep the space (Terminating, with the reason in its status) and retry: it is
                # removed only once every agent has really torn its objects down.
                teardown_error = f"Cleaning up failed, retrying: {exc}"[:500]
                state.space_error, state.torn_down = teardown_error, False
                state.save(update_fields=["space_error", "torn_down"])
            else:
                state.torn_down = True
                state.address_errors, state.space_error = {}, ""
        else:
            report = agent.reconcile(space)
            state.address_errors, state.space_error = report.address_errors, report.space_error
        if not teardown_error:  # else nothing was applied: the error is kept, a retry comes
            now = timezone.now()
            _record_applied(space_uid, kind, state.applied_sequence, target, now)
            state.applied_sequence = max(state.applied_sequence, target)
            state.applied_at = now
            state.save()
            _ack_outbox(space_uid, space)
    if teardown_error:
        logger.warning("agent.teardown_failed", extra={
            "space": str(space_uid), "agent": kind, "tenant": space.tenant.slug,
            "vhost": space.vhost, "error": teardown_error})
        raise TransientError(teardown_error)
    logger.info("agent.applied", extra={"space": str(space_uid), "agent": kind,
                                        "tenant": space.tenant.slug, "sequence": target})
    if space.terminating and _all_torn_down(space):
        services.remove_address_space(uid=space.uid)
    return target


def _record_applied(space_uid, kind, after: int, upto: int, now) -> None:
    events = ConfigEvent.objects.filter(
        stream_id=space_uid, sequence__gt=after, sequence__lte=upto
    ).values_list("position", "created_at")
    AppliedEvent.objects.bulk_create(
        [
            AppliedEvent(event_id=position, kind=kind, applied_at=now,
                         latency_seconds=(now - created).total_seconds())
            for position, created in events
        ],
        ignore_conflicts=True,
    )


def _ack_outbox(space_uid, space: AddressSpace | None) -> None:
    """Marks outbox rows done once every installed agent of the space has applied them."""
    pending = Outbox.objects.filter(stream_uid=space_uid, acked_at__isnull=True)
    if space is not None:
        kinds = installed_kinds(space.type)
        applied = dict(
            AgentState.objects.filter(space_uid=space_uid, kind__in=kinds).values_list(
                "kind", "applied_sequence"
            )
        )
        upto = min((applied.get(k, 0) for k in kinds), default=0)
        pending = pending.filter(sequence__lte=upto)
    pending.update(acked_at=timezone.now())


def _all_torn_down(space: AddressSpace) -> bool:
    kinds = installed_kinds(space.type)
    done = AgentState.objects.filter(space_uid=space.uid, kind__in=kinds, torn_down=True).count()
    return done == len(kinds)
