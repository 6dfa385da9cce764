"""Derives the status of address spaces and addresses from what the agents applied.

An address is Active when every agent it needs has applied a sequence at least its
resourceVersion without an error for it; Pending while unscheduled (with the reason);
Configuring until then; Failed on a permanent agent error; Terminating with its space. A state
invalidated since it was applied (its router restarted empty) does not count until reapplied.
"""
from dataclasses import dataclass, field

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from . import statements
from .models import Address, AddressSpace, AgentState

SPACE_TYPES = ("brokered", "standard")
ROUTER_ONLY_TYPES = ("anycast", "multicast")
# Every phase an address space or an address can be in (EnMasse's), in lifecycle order.
PHASES = ("Pending", "Configuring", "Active", "Failed", "Terminating")


def agents_needed(space_type: str) -> tuple[str, ...]:
    """The agent kinds a space of the type needs: a standard space also needs the router agent,
    and on Kubernetes the infra agent that runs its router, brokers and agent pod
    (workers/infra). Kept per type until the settings change (not fixed at import): a scrape
    asks it thousands of times, and each read of Django's lazy settings costs microseconds."""
    needed = _NEEDED.get(space_type)
    if needed is None:
        needed = ("storage",)
        if space_type == "standard":
            infra = ("infra",) if settings.MAAS_INFRA_BACKEND == "kubernetes" else ()
            needed = ("storage", "router") + infra
        _NEEDED[space_type] = needed
    return needed


_NEEDED: dict[str, tuple[str, ...]] = {}


@receiver(setting_changed)
def _settings_changed(setting, **kwargs):
    if setting == "MAAS_INFRA_BACKEND":
        _NEEDED.clear()


def agents_for_address(space_type: str, address_type: str) -> tuple[str, ...]:
    kinds = agents_needed(space_type)
    if address_type in ROUTER_ONLY_TYPES:
        return tuple(k for k in kinds if k != "storage")
    return kinds


@dataclass
class Status:
    phase: str
    is_ready: bool
    messages: list[str] = field(default_factory=list)


def agent_states(space_uids) -> dict:
    """{space_uid: {kind: AgentState}} in one query."""
    states: dict = {}
    for state in statements.agent_states(list(space_uids)):
        states.setdefault(state.space_uid, {})[state.kind] = state
    return states


def _waiting(kind: str, state: AgentState | None) -> str:
    if kind == "router" and not settings.MAAS_ROUTER_ENABLED:
        return ("No router in this installation (MAAS_ROUTER_ENABLED=false): a standard "
                "address space cannot become Active")
    if state is None or state.applied_at is None:
        return f"Waiting for the {kind} agent"
    return f"Waiting for the {kind} agent to apply the latest change"


def address_status(space: AddressSpace, address: Address, states: dict) -> Status:
    if space.terminating:
        return Status("Terminating", False, ["Address space is being deleted"])
    if not address.scheduled:
        return Status("Pending", False, [address.pending_reason or "Not yet scheduled"])
    messages, failed = [], False
    for kind in agents_for_address(space.type, address.type):
        state = states.get(kind)
        error = state.address_errors.get(address.name) if state else None
        if state is not None and state.invalidated:
            messages.append(state.invalidated)
        elif error:
            messages.append(error["message"])
            failed = failed or error.get("permanent", False)
        elif state is None or state.applied_sequence < address.resource_version:
            messages.append(_waiting(kind, state))
    if failed:
        return Status("Failed", False, messages)
    if messages:
        return Status("Configuring", False, messages)
    return Status("Active", True, [])


def space_status(space: AddressSpace, states: dict) -> Status:
    kinds = agents_needed(space.type)
    if space.terminating:
        pending = [k for k in kinds if not (states.get(k) and states[k].torn_down)]
        return Status("Terminating", False, [
            (states[k].space_error if states.get(k) and states[k].space_error
             else f"Waiting for the {k} agent to clean up") for k in pending])
    messages = []
    for kind in kinds:
        state = states.get(kind)
        if state and state.invalidated:
            messages.append(state.invalidated)
        elif state and state.space_error:
            messages.append(state.space_error)
        elif state is None or state.applied_sequence < space.resource_version:
            messages.append(_waiting(kind, state))
    if messages:
        return Status("Configuring", False, messages)
    return Status("Active", True, [])


def phase_filter(space: AddressSpace, phase: str, states: dict):
    """A queryset filter for addresses of `space` in `phase`, consistent with address_status."""
    from django.db.models import Q

    if space.terminating:
        return Q() if phase == "Terminating" else Q(pk__in=[])
    if phase == "Pending":
        return Q(scheduled=False)
    if phase == "Terminating":
        return Q(pk__in=[])
    failed_names, error_names = set(), set()
    not_ready = Q(pk__in=[])
    for kind in agents_needed(space.type):
        state = states.get(kind)
        applies = ~Q(type__in=ROUTER_ONLY_TYPES) if kind == "storage" else Q()
        if state is None or state.invalidated:
            not_ready |= applies
            continue
        for name, error in state.address_errors.items():
            (failed_names if error.get("permanent") else error_names).add(name)
        not_ready |= applies & Q(resource_version__gt=state.applied_sequence)
    if phase == "Failed":
        return Q(scheduled=True, name__in=failed_names)
    healthy = Q(scheduled=True) & ~Q(name__in=failed_names)
    if phase == "Configuring":
        return healthy & (not_ready | Q(name__in=error_names))
    if phase == "Active":
        return healthy & ~not_ready & ~Q(name__in=error_names)
    return Q(pk__in=[])
