"""Prometheus metrics at /metrics, computed from the database at scrape time.

EnMasse's names where they exist (enmasse_addresses_total and per phase,
enmasse_address_spaces_total, enmasse_address_space_connectors_total), the latency from event appended to event applied per agent
kind as a histogram, and what the alert rules of deploy/monitoring need (metrics_ops.py). Reading from the database keeps the figures right
however many web and worker processes run. Only a Prometheus with MAAS_METRICS_TOKEN, or a
client on this machine, reads them (scrape_access.py).

A scrape runs the same few queries whatever the fleet: addresses are counted per phase by
config_service.status.phase_counts (GROUP BYs, not loaded). Spaces and agent states are read as
tuples. The per-space gauges (most of a scrape's lines) are written directly, byte for byte as
prometheus_client would.
"""
import threading
import uuid
from typing import NamedTuple

from django.db import connection
from django.db.models import BooleanField, ExpressionWrapper, IntegerField, JSONField, Q
from django.db.models.expressions import RawSQL
from django.http import HttpResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

from config_service.models import AddressSpace, AgentState
from config_service.status import PHASES, forget_counts_but, phase_counts, space_status

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
    connectors: int = 0  # its spec.connectors, counted in SQL (the spec is not read)


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


# A space's connectors to remote endpoints (spec.connectors, a list where the API stored it).
CONNECTORS_SQL = ("case when jsonb_typeof(spec->'connectors') = 'array' "
                  "then jsonb_array_length(spec->'connectors') else 0 end")


def scrape() -> bytes:
    """The text of one scrape (Prometheus text format 0.0.4)."""
    spaces = [ScrapedSpace(*row) for row in AddressSpace.objects.annotate(
        connectors=RawSQL(CONNECTORS_SQL, [], output_field=IntegerField()),
    ).values_list("pk", "uid", "name", "type", "resource_version", "last_sequence",
                  "terminating", "tenant__slug", "connectors")]
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
    forget_counts_but(spaces)
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
        yield GaugeMetricFamily("enmasse_address_space_connectors_total",
                                "Connectors of address spaces to remote endpoints",
                                value=sum(s.connectors for s in self.spaces))
        # Counted through the partial index outbox_pending: as cheap as the backlog is short.
        yield from outbox_families()
        yield throttled_family()
        yield from usage_job_families()
        yield LATENCY.family()


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
