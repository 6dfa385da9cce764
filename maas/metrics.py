"""Prometheus metrics at /metrics, computed from the database at scrape time.

EnMasse's names where they exist (enmasse_addresses_total and per phase,
enmasse_address_spaces_total), the latency from event appended to event applied per agent
kind as a histogram, and what the alert rules of deploy/monitoring need (metrics_ops.py). Reading from the database keeps the figures right
however many web and worker processes run. Only a Prometheus with MAAS_METRICS_TOKEN, or a
client on this machine, reads them (scrape_access.py).

A scrape runs the same few queries whatever the fleet: addresses are counted per phase by
GROUP BYs, not loaded: per space and type from the indexes (only in the spaces whose last
sequence moved since this process counted them: `_address_counts`), by the agents' sequences
only in the spaces where an agent is behind, and those with errors by which agent kinds
reported them and whether permanently. Spaces and agent states are read as tuples. The
per-space gauges (most of a scrape's lines) are written directly, byte for byte as
prometheus_client would.
"""
import threading
import uuid
from itertools import combinations
from typing import NamedTuple

from django.db import connection
from django.db.models import BooleanField, ExpressionWrapper, JSONField, Q
from django.db.models.expressions import RawSQL
from django.http import HttpResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

from config_service.models import Address, AddressSpace, AgentState
from config_service.status import (
    PHASES,
    address_status,
    agents_for_address,
    agents_needed,
    space_status,
)

from .metrics_ops import outbox_families, throttled_family, usage_job_families
from .scrape_access import scrape_protected

BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


# The per-space families, one sample per address space each, in the order of the values
# `per_space_text` computes. EnMasse labels the space `addressspace` in the address counts and
# `name` in its readiness.
_PER_SPACE = [("enmasse_addresses_total", "Addresses"),
              ("enmasse_addresses_ready_total", "Ready addresses"),
              ("enmasse_addresses_not_ready_total", "Addresses not ready")] + [
              (f"enmasse_addresses_{p.lower()}_total", f"Addresses {p}") for p in PHASES]


class ScrapedSpace(NamedTuple):
    """What a scrape reads of an address space, as space_status and address_status read it: a
    tuple, not a model (1,000 spaces: 13 ms as models, 5 ms as tuples)."""
    pk: int
    uid: uuid.UUID
    name: str
    type: str
    resource_version: int
    last_sequence: int
    terminating: bool
    namespace: str  # the tenant's slug


class ScrapedState(NamedTuple):
    """What space_status, address_status and the error counts read of an AgentState: a tuple,
    every space's read at once (1,800 states: 52 ms as models named by 1,000 uids, 28 ms as
    tuples of all)."""
    kind: str
    applied_sequence: int
    applied_at: bool | None  # True once the agent applied anything: all a status reads of it
    address_errors: dict
    space_error: str
    torn_down: bool
    invalidated: str


def scrape() -> bytes:
    """The text of one scrape (Prometheus text format 0.0.4)."""
    spaces = [ScrapedSpace(*row) for row in AddressSpace.objects.values_list(
        "pk", "uid", "name", "type", "resource_version", "last_sequence", "terminating",
        "tenant__slug")]
    states: dict = {}  # {space uid: {kind: state}}, as agent_states gives them
    # Of 2,000 states at 100k, parsing every applied_at and decoding every empty address_errors
    # was a seventh of the scrape: whether it was applied, and the errors where there are any.
    for space_uid, kind, sequence, applied, errors, *rest in AgentState.objects.annotate(
            applied=ExpressionWrapper(Q(applied_at__isnull=False), output_field=BooleanField()),
            errors=RawSQL("nullif(address_errors, '{}'::jsonb)", [], output_field=JSONField()),
    ).values_list("space_uid", "kind", "applied_sequence", "applied", "errors", "space_error",
                  "torn_down", "invalidated"):
        states.setdefault(space_uid, {})[kind] = ScrapedState(kind, sequence, applied or None,
                                                              errors or {}, *rest)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetCollector(spaces, states))
    text = per_space_text(spaces, states) + generate_latest(registry)
    _forget_counts_but(spaces)
    return text


def per_space_text(spaces, states) -> bytes:
    """The per-space gauges, written directly: at 1,000 spaces they are about 11,000 of a scrape's
    samples, and prometheus_client's writer (which escapes every label of every sample and
    formats every value as a float) took about as long as the queries. Each space's labels are
    escaped once here, for all its samples.

    `maas_agent_errors`: per space and agent kind, the addresses the agent failed on, plus one
    if it failed on the whole space. Every agent that reported is listed, at 0 when it is well,
    so an alert resolves rather than vanishing."""
    counts = phase_counts(spaces, states)
    rows = []  # (labels, [a value per family of _PER_SPACE], readiness labels, ready)
    errors = []  # (labels, errors) per space and agent kind
    for space in spaces:
        c = counts[space.pk]
        total = sum(c.values())
        namespace, name = _escape(space.namespace), _escape(space.name)
        # As prometheus_client writes them: labels sorted by name, values as floats.
        rows.append((f'addressspace="{name}",namespace="{namespace}"',
                     [total, c["Active"], total - c["Active"], *(c[p] for p in PHASES)],
                     f'name="{name}",namespace="{namespace}"',
                     space_status(space, states.get(space.uid, {})).is_ready))
        for kind, state in sorted(states.get(space.uid, {}).items()):
            errors.append((f'addressspace="{name}",agent="{_escape(kind)}",namespace="{namespace}"',
                           len(state.address_errors) + (1 if state.space_error else 0)))
    lines = []
    for i, (family, text) in enumerate(_PER_SPACE):
        lines += [f"# HELP {family} {text}", f"# TYPE {family} gauge"]
        lines += [f"{family}{{{labels}}} {values[i]}.0" for labels, values, _, _ in rows]
    family = "enmasse_address_space_status_ready"
    lines += [f"# HELP {family} 1 if the address space is ready", f"# TYPE {family} gauge"]
    lines += [f"{family}{{{labels}}} {int(ready)}.0" for _, _, labels, ready in rows]
    family = "maas_agent_errors"
    lines += [f"# HELP {family} Errors an agent reported for an address space (addresses, plus "
              "1 for a space-wide error)", f"# TYPE {family} gauge"]
    lines += [f"{family}{{{labels}}} {n}.0" for labels, n in errors]
    return ("\n".join(lines) + "\n").encode()


def _escape(value: str) -> str:
    """A label value as the text format wants it (backslash, double quote and newline escaped)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class FleetCollector:
    """The families of the whole fleet, of which there are few samples: totals, the outbox,
    throttled tenants, the usage job and the apply latency."""

    def __init__(self, spaces, states):
        self.spaces, self.states = spaces, states

    def collect(self):
        yield GaugeMetricFamily("enmasse_address_spaces_total", "Address spaces",
                                value=len(self.spaces))
        # Counted through the partial index outbox_pending: as cheap as the backlog is short.
        yield from outbox_families()
        yield throttled_family()
        yield from usage_job_families()
        yield LATENCY.family()


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


def _forget_counts_but(spaces) -> None:
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


class AppliedLatency:
    """The apply-latency histogram, kept per process: AppliedEvent only grows (a row per event
    and agent kind, never updated), so rows once counted are kept as sums and a scrape reads
    only the newer ones. Aggregating the whole table took ~60 ms at 200,000 rows and grows
    with every event ever applied; a time window instead would make the counts fall, which a
    Prometheus histogram must not."""

    # Rows are folded into the sums once this old: the agent's _record transaction that wrote
    # them (and any row of a lower id) has long committed by then, so no row is skipped.
    SETTLED = "1 minute"

    def __init__(self):
        self._lock = threading.Lock()
        self._upto = 0  # the highest id in the sums
        self._sums: dict[str, list] = {}  # kind -> [count per bucket..., count, sum]

    def family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(
            "maas_event_apply_latency_seconds",
            "Seconds from a config event appended to applied and verified, per agent kind",
            labels=["agent"],
        )
        with self._lock:
            recent = self._read()
            figures = {k: _add(self._sums.get(k), recent.get(k))
                       for k in self._sums.keys() | recent.keys()}
        for kind in sorted(figures):
            *counts, count, total = figures[kind]
            buckets = [(str(b), c) for b, c in zip(BUCKETS, counts, strict=True)]
            buckets.append(("+Inf", count))
            family.add_metric([kind], buckets, total)
        return family

    def _read(self) -> dict:
        """Folds the settled rows after _upto into the sums; returns the figures of the rest."""
        cut = self._cut()
        cases = ", ".join(f"count(*) filter (where latency_seconds <= {b})" for b in BUCKETS)
        with connection.cursor() as cursor:
            cursor.execute(
                f"select kind, id <= %(cut)s, {cases}, count(*), "  # noqa: S608
                "coalesce(sum(latency_seconds), 0) from config_service_appliedevent "
                "where id > %(upto)s group by 1, 2",
                {"upto": self._upto, "cut": cut},
            )
            rows = cursor.fetchall()
        recent: dict = {}
        for kind, settled, *figures in rows:
            if settled:
                self._sums[kind] = _add(self._sums.get(kind), figures)
            else:
                recent[kind] = figures
        self._upto = cut
        return recent

    def _cut(self) -> int:
        """The id the sums will end at: the last row applied over SETTLED ago (by the database's
        clock: the agents' hosts keep the same time to well within that)."""
        with connection.cursor() as cursor:
            cursor.execute(
                "select coalesce(max(id) filter (where applied_at < statement_timestamp() - "
                f"interval '{self.SETTLED}'), %(upto)s), "
                "%(upto)s = 0 or exists (select from config_service_appliedevent "
                "where id = %(upto)s) from config_service_appliedevent where id > %(upto)s",
                {"upto": self._upto},
            )
            cut, intact = cursor.fetchone()
        if not intact:  # the last row summed is gone (table emptied or restored): start over
            self._upto, self._sums = 0, {}
            return self._cut()
        return cut


def _add(a: list | None, b: list | None) -> list:
    return [x + y for x, y in zip(a or [0] * len(b), b or [0] * len(a), strict=True)]


LATENCY = AppliedLatency()


@scrape_protected
def view(request):
    return HttpResponse(scrape(), content_type="text/plain; version=0.0.4; charset=utf-8")
