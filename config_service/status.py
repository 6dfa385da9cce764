"""Derives the status of address spaces and addresses from what the agents applied.

An address is Active when every agent it needs has applied a sequence at least its
resourceVersion without an error for it; Pending while unscheduled (with the reason);
Configuring until then; Failed on a permanent agent error; Terminating with its space. A state
invalidated since it was applied (its router restarted empty) does not count until reapplied.

`address_status` derives one address's status; `phase_counts` counts every address of many
spaces per phase by the same rules, in a few GROUP BYs (what /metrics reads at 100,000
addresses), and `phase_filter` selects an address list by phase. The three live here together
so that a change of the rules changes all of them; tests/test_metrics_scale.py checks that the
counts agree with address_status address by address.
"""
import threading
from dataclasses import dataclass, field
from itertools import combinations

from django.conf import settings
from django.core.signals import setting_changed
from django.db import connection
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


# Counted in bulk ---------------------------------------------------------------------------

def phase_counts(spaces, states) -> dict:
    """{space id: {phase: addresses}}, as address_status would put every address, in a few
    queries: counts per space and type from the indexes, the addresses some agent has not
    applied yet counted only in the spaces where one is behind (`_grouped`), and the addresses
    an agent reported an error for judged on their own (`_judge_errored`)."""
    counts = {s.pk: dict.fromkeys(PHASES, 0) for s in spaces}
    by_pk = {s.pk: s for s in spaces}
    # (space id, name) -> {kind: permanent} of the errors an agent reported for the address.
    # An invalidated state's errors do not count (address_status reads the invalidation
    # instead): its addresses are behind in `_grouped`, which puts them where it does.
    errored: dict[tuple, dict[str, bool]] = {}
    for s in spaces:
        if s.terminating:
            continue
        for kind, state in states.get(s.uid, {}).items():
            if state.invalidated:
                continue
            for name, error in state.address_errors.items():
                errored.setdefault((s.pk, name), {})[kind] = bool(error.get("permanent", False))
    judged = _errored_groups(errored)
    for space_id, address_type, n, pending, late in _grouped(spaces, states, errored, judged):
        space, figures = by_pk[space_id], counts[space_id]
        if space.terminating:
            figures["Terminating"] += n
            continue
        behind = late.get(frozenset(agents_for_address(space.type, address_type)), 0)
        # The errors, the counts and the addresses behind are read in three statements, each on
        # a snapshot of its own: an address made or removed between them must not make a
        # figure negative (it is off by the changes of those milliseconds, as any gauge is).
        n = max(0, n)
        pending = max(0, min(pending, n))
        behind = max(0, min(behind, n - pending))
        figures["Pending"] += pending
        figures["Configuring"] += behind
        figures["Active"] += n - pending - behind
    _judge_errored(by_pk, states, errored, judged, counts)
    return counts


def _errored_groups(errored: dict) -> list:
    """The addresses with errors grouped in SQL: (space id, type, scheduled, kinds that reported
    errors, kinds that reported them permanently, addresses)."""
    if not errored:
        return []
    keys = list(errored)
    kinds = [",".join(sorted(errored[k])) for k in keys]
    permanent = [",".join(sorted(kind for kind, p in errored[k].items() if p)) for k in keys]
    with connection.cursor() as cursor:
        cursor.execute(
            "select a.space_id, a.type, a.scheduled, e.kinds, e.permanent, count(*) "
            "from unnest(%s::bigint[], %s::text[], %s::text[], %s::text[]) "
            "as e(space_id, name, kinds, permanent) "
            "join config_service_address a on a.space_id = e.space_id and a.name = e.name "
            "group by 1, 2, 3, 4, 5",
            [[pk for pk, _ in keys], [name for _, name in keys], kinds, permanent],
        )
        return cursor.fetchall()


def _judge_errored(by_pk: dict, states: dict, errored: dict, judged: list,
                   counts: dict) -> None:
    """Adds the addresses with errors (`judged`) to `counts`: an unscheduled one is Pending,
    one with a permanent error from an agent it needs Failed, one with any other error from an
    agent it needs Configuring, as address_status says. During a big fill most addresses are
    "not yet verified" (77,000 of 100,000 seen): none is loaded one by one. Only those whose
    errors come from agents they do not need (an address remade as another type since) go
    through address_status."""
    elsewhere = set()  # (space id, type, kinds) whose errors come from agents not needed
    for space_id, address_type, scheduled, reported, lasting, n in judged:
        needed = set(agents_for_address(by_pk[space_id].type, address_type))
        if not scheduled:
            phase = "Pending"
        elif needed & set(lasting.split(",")) - {""}:
            phase = "Failed"
        elif needed & set(reported.split(",")):
            phase = "Configuring"
        else:
            elsewhere.add((space_id, address_type, reported))
            continue
        counts[space_id][phase] += n
    if not elsewhere:
        return
    groups = {(pk, reported) for pk, _, reported in elsewhere}
    names = {name for (pk, name), kinds in errored.items()
             if (pk, ",".join(sorted(kinds))) in groups}
    for address in Address.objects.filter(
        space_id__in={e[0] for e in elsewhere}, name__in=names,
        type__in={e[1] for e in elsewhere},
    ).only("space_id", "name", "type", "scheduled", "pending_reason", "resource_version"):
        key = (address.space_id, address.type, ",".join(sorted(
            errored.get((address.space_id, address.name), {}))))
        if key in elsewhere:  # not a namesake in another space, or of another group
            space = by_pk[address.space_id]
            counts[space.pk][address_status(space, address, states.get(space.uid, {})).phase] += 1


def _grouped(spaces, states, errored, judged) -> list:
    """Per space and address type, leaving the errored addresses out: (space id, type,
    addresses, unscheduled ones, {kinds: scheduled ones one of these kinds has not applied}).

    The counts come from the indexes (space and type; the unscheduled ones' partial index),
    without reading the 100,000 rows of a full fleet; the errored addresses are taken off them
    by `judged`. Only a space where an agent it needs is behind its last event (or missing or
    invalidated) can have an address not applied: those are counted row by row, for every set
    of the kinds in use (which kinds an address needs is for agents_for_address to say). What
    each kind applied comes from `states`, the rows space_status and the errors are read from,
    not from a join: every figure of a scrape agrees with them."""
    if not spaces:
        return []
    figures: dict[tuple, list] = {}  # (space id, type) -> [addresses, unscheduled]
    for space_id, by_type in _address_counts(spaces).items():
        for address_type, (n, unscheduled) in by_type.items():
            figures[(space_id, address_type)] = [n, unscheduled]
    for space_id, address_type, scheduled, _, _, n in judged:
        figure = figures.setdefault((space_id, address_type), [n, 0 if scheduled else n])
        figure[0] -= n
        figure[1] -= 0 if scheduled else n
    late = _late(
        [s for s in spaces if not s.terminating and not _applied_all(s, states.get(s.uid, {}))],
        states, errored)
    return [(space_id, address_type, n, pending, late.get((space_id, address_type), {}))
            for (space_id, address_type), (n, pending) in figures.items()]


# {space id: ((uid, last_sequence), {type: (addresses, unscheduled ones)})}, this process's
# counts of the addresses of each space as of that sequence (`_address_counts`). The uid too:
# a database emptied or restored under a running process may give an id to another space.
_counted: dict[int, tuple[tuple, dict[str, tuple[int, int]]]] = {}
_counted_lock = threading.Lock()


def _address_counts(spaces) -> dict[int, dict[str, tuple[int, int]]]:
    """{space id: {type: (addresses, unscheduled ones)}} of `spaces`, counted from the indexes
    only in the spaces whose last sequence moved since this process last counted them: at
    100k, counting every space's index entries was 31 ms of each scrape, and between two
    scrapes few spaces change. Exact: a space's addresses are projections of its events, so
    they change only with its last sequence; the sequence kept is the one read (in `spaces`)
    before the count, so a change committed in between is counted and the space is counted
    again at the next scrape, which reads a later sequence."""
    with _counted_lock:
        counted = dict(_counted)
    stale = {s.pk: (s.uid, s.last_sequence) for s in spaces
             if counted.get(s.pk, (None,))[0] != (s.uid, s.last_sequence)}
    if stale:
        fresh: dict[int, dict[str, list]] = {pk: {} for pk in stale}
        with connection.cursor() as cursor:
            # Two index-only scans (the second on the partial index), in one round trip.
            cursor.execute("select space_id, type, false, count(*) from config_service_address "
                           "where space_id = any(%(pks)s) group by 1, 2 union all "
                           "select space_id, type, true, count(*) from config_service_address "
                           "where space_id = any(%(pks)s) and not scheduled group by 1, 2",
                           {"pks": list(stale)})
            for space_id, address_type, unscheduled, n in cursor.fetchall():
                fresh[space_id].setdefault(address_type, [0, 0])[1 if unscheduled else 0] = n
        fresh = {pk: (stale[pk], {t: tuple(v) for t, v in by_type.items()})
                 for pk, by_type in fresh.items()}
        with _counted_lock:
            _counted.update(fresh)
        counted.update(fresh)
    return {s.pk: counted[s.pk][1] for s in spaces}


def forget_counts_but(spaces) -> None:
    """Drops the counts of the spaces not in `spaces`, every space a scrape read: the others
    are gone (ids are never reused), and their counts would pile up over a process's life."""
    wanted = {s.pk for s in spaces}
    with _counted_lock:
        for pk in [pk for pk in _counted if pk not in wanted]:
            del _counted[pk]


def _applied_all(space, states: dict) -> bool:
    """Whether every agent the space needs applied its last event: then none of its addresses
    (each at the sequence of the event that last changed it) is behind."""
    return all(_covered(states.get(kind)) >= space.last_sequence
               for kind in agents_needed(space.type))


def _late(spaces, states, errored) -> dict:
    """{(space id, type): {kinds: scheduled addresses one of these kinds has not applied}} of
    `spaces`, leaving the errored addresses out."""
    kinds = sorted({k for s in spaces for k in agents_needed(s.type)})
    if not kinds:
        return {}
    sets = [c for size in range(1, len(kinds) + 1) for c in combinations(range(len(kinds)), size)]
    behind = ", ".join(
        "count(*) filter (where a.scheduled and a.resource_version > least({}))".format(
            ", ".join(f"t.k{i}" for i in kind_set))
        for kind_set in sets
    )
    columns = [[s.pk for s in spaces]] + [
        [_covered(states.get(s.uid, {}).get(kind)) for s in spaces] for kind in kinds]
    with connection.cursor() as cursor:
        cursor.execute(
            f"select a.space_id, a.type, {behind} from config_service_address a "  # noqa: S608
            f"join unnest({', '.join(['%s::bigint[]'] * len(columns))}) "
            f"as t(space_id, {', '.join(f'k{i}' for i in range(len(kinds)))}) "
            "on t.space_id = a.space_id "
            "where not exists (select from unnest(%s::bigint[], %s::text[]) as e(space_id, name) "
            "where e.space_id = a.space_id and e.name = a.name) "
            "group by a.space_id, a.type",
            [*columns, [pk for pk, _ in errored], [name for _, name in errored]],
        )
        rows = cursor.fetchall()
    keys = [frozenset(kinds[i] for i in kind_set) for kind_set in sets]
    return {(space_id, address_type): dict(zip(keys, late_counts, strict=True))
            for space_id, address_type, *late_counts in rows}


def _covered(state) -> int:
    """The resourceVersion up to which an agent's state counts: none (-1) while it is missing or
    invalidated, as in address_status."""
    return -1 if state is None or state.invalidated else state.applied_sequence
