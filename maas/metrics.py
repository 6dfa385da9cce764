"""Prometheus metrics at /metrics, computed from the database at scrape time.

EnMasse's names where they exist (enmasse_addresses_total and per phase,
enmasse_address_spaces_total), the latency from event appended to event applied per agent
kind as a histogram, and the outbox backlog. Reading from the database keeps the figures right
however many web and worker processes run. Only a Prometheus with MAAS_METRICS_TOKEN, or a
client on this machine, reads them (scrape_access.py).
"""
from django.db import connection
from django.http import HttpResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

from config_service.models import Address, AddressSpace, Outbox
from config_service.status import address_status, agent_states, space_status

from .scrape_access import scrape_protected

BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
PHASES = ("Pending", "Configuring", "Active", "Failed", "Terminating")


class ControlPlaneCollector:
    def collect(self):
        spaces = list(AddressSpace.objects.select_related("tenant"))
        states = agent_states(s.uid for s in spaces)
        total = GaugeMetricFamily("enmasse_addresses_total", "Addresses",
                                  labels=["namespace", "addressspace"])
        ready = GaugeMetricFamily("enmasse_addresses_ready_total", "Ready addresses",
                                  labels=["namespace", "addressspace"])
        not_ready = GaugeMetricFamily("enmasse_addresses_not_ready_total",
                                      "Addresses not ready", labels=["namespace", "addressspace"])
        by_phase = {
            p: GaugeMetricFamily(f"enmasse_addresses_{p.lower()}_total", f"Addresses {p}",
                                 labels=["namespace", "addressspace"])
            for p in PHASES
        }
        space_ready = GaugeMetricFamily("enmasse_address_space_status_ready",
                                        "1 if the address space is ready",
                                        labels=["namespace", "name"])
        by_space: dict = {s.pk: [] for s in spaces}
        for address in Address.objects.only(
            "space_id", "name", "type", "scheduled", "pending_reason", "resource_version"
        ).iterator(chunk_size=5000):
            by_space[address.space_id].append(address)
        for space in spaces:
            labels = [space.tenant.slug, space.name]
            counts = dict.fromkeys(PHASES, 0)
            for address in by_space.get(space.pk, []):
                counts[address_status(space, address, states.get(space.uid, {})).phase] += 1
            n = sum(counts.values())
            total.add_metric(labels, n)
            ready.add_metric(labels, counts["Active"])
            not_ready.add_metric(labels, n - counts["Active"])
            for phase, family in by_phase.items():
                family.add_metric(labels, counts[phase])
            status = space_status(space, states.get(space.uid, {}))
            space_ready.add_metric(labels, 1 if status.is_ready else 0)
        yield total
        yield ready
        yield not_ready
        yield from by_phase.values()
        yield space_ready
        yield GaugeMetricFamily("enmasse_address_spaces_total", "Address spaces",
                                value=len(spaces))
        yield GaugeMetricFamily("maas_outbox_backlog", "Config events not yet applied by agents",
                                value=Outbox.objects.filter(acked_at__isnull=True).count())
        yield self._latency()

    def _latency(self):
        family = HistogramMetricFamily(
            "maas_event_apply_latency_seconds",
            "Seconds from a config event appended to applied and verified, per agent kind",
            labels=["agent"],
        )
        cases = ", ".join(
            f"count(*) filter (where latency_seconds <= {b})" for b in BUCKETS
        )
        with connection.cursor() as cursor:
            cursor.execute(
                f"select kind, {cases}, count(*), coalesce(sum(latency_seconds), 0) "  # noqa: S608
                "from config_service_appliedevent group by kind order by kind"
            )
            for row in cursor.fetchall():
                kind, counts, count, total = row[0], row[1:-2], row[-2], row[-1]
                buckets = [(str(b), c) for b, c in zip(BUCKETS, counts, strict=True)]
                buckets.append(("+Inf", count))
                family.add_metric([kind], buckets, total)
        return family


@scrape_protected
def view(request):
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ControlPlaneCollector())
    return HttpResponse(generate_latest(registry),
                        content_type="text/plain; version=0.0.4; charset=utf-8")
