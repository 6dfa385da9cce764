"""/metrics at fleet scale: per-phase counts from SQL equal address_status for every address,
one scrape runs the same queries for 1 space as for 30, and the latency histogram kept per
process equals the whole AppliedEvent table."""
import re
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from config_service import services, status
from config_service.models import Address, AddressSpace, AgentState, AppliedEvent
from config_service.status import PHASES, address_status, agent_states, phase_counts, space_status
from eventlog.models import ConfigEvent
from maas.metrics import BUCKETS, AppliedLatency, per_space_text
from tenants.services import set_quota
from tests.conftest import CTX


def gauges(client) -> dict:
    """{(metric, namespace, address space): value} of one scrape, as Prometheus parses it."""
    text = client.get("/metrics").content.decode()
    return {(s.name, s.labels.get("namespace"), s.labels.get("addressspace")): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def space(tenant, name, type_, **addresses):
    """A space with addresses {address: (type, plan)}, created through the service functions."""
    plan = "standard-small" if type_ == "standard" else "brokered-single-broker"
    made = services.create_address_space(ctx=CTX, tenant=tenant, name=name, type=type_,
                                         plan=plan)
    for address, (address_type, address_plan) in addresses.items():
        services.create_address(ctx=CTX, space=made, address=address, type=address_type,
                                plan=address_plan)
    return made


def rv(made, address) -> int:
    return Address.objects.get(space=made, address=address).resource_version


def report(made, kind, upto=None, errors=None, invalidated=""):
    """What an agent of `kind` reported for the space: applied up to `upto` (all by default)."""
    made.refresh_from_db()
    AgentState.objects.create(
        space_uid=made.uid, kind=kind, applied_at=timezone.now(), invalidated=invalidated,
        applied_sequence=made.last_sequence if upto is None else upto,
        address_errors={f"{made.name}.{a}": {"message": f"{a} failed", "permanent": permanent}
                        for a, permanent in (errors or {}).items()})


@pytest.fixture
def fleet(tenant):
    """Spaces with addresses in every phase, of both space types and both kinds of address."""
    stored = space(tenant, "stored", "brokered", **{
        f"q{i}": ("queue", "brokered-queue") for i in range(4)}, t0=("topic", "brokered-topic"))
    report(stored, "storage", upto=rv(stored, "q2"), errors={"q0": True, "q1": False})
    routed = space(tenant, "routed", "standard", a0=("anycast", "standard-small-anycast"),
                   m0=("multicast", "standard-small-multicast"),
                   q0=("queue", "standard-small-queue"), t0=("topic", "standard-small-topic"),
                   big=("queue", "standard-large-queue"))  # no room for it: Pending
    # The storage agent is behind on every address, and its error for the anycast one does not
    # count: no storage agent serves router-only addresses.
    report(routed, "storage", upto=rv(routed, "a0") - 1, errors={"a0": True})
    report(routed, "router", upto=rv(routed, "m0"), errors={"q0": True})
    report(routed, "infra", upto=rv(routed, "a0"))  # needed on Kubernetes only
    restarted = space(tenant, "restarted", "standard", a0=("anycast", "standard-small-anycast"),
                      q0=("queue", "standard-small-queue"))
    report(restarted, "storage")
    report(restarted, "router", errors={"q0": True}, invalidated="Router restarted empty")
    # Every agent applied the last event: counted from the indexes, its errors judged apart
    # (the storage agent's for the anycast one does not count).
    settled = space(tenant, "settled", "standard", a0=("anycast", "standard-small-anycast"),
                    q0=("queue", "standard-small-queue"), q1=("queue", "standard-small-queue"),
                    q2=("queue", "standard-small-queue"),
                    big=("queue", "standard-large-queue"))  # no room for it: Pending
    report(settled, "storage", errors={"a0": True})
    report(settled, "router", errors={"q0": True, "q1": False})
    report(settled, "infra")
    lagging = space(tenant, "lagging", "brokered", q0=("queue", "brokered-queue"),
                    q1=("queue", "brokered-queue"))
    report(lagging, "storage", upto=rv(lagging, "q0"))  # one event behind: q1's
    space(tenant, "unreported", "brokered", q0=("queue", "brokered-queue"))
    leaving = space(tenant, "leaving", "brokered", q0=("queue", "brokered-queue"),
                    q1=("queue", "brokered-queue"))
    report(leaving, "storage", errors={"q0": True})
    services.delete_address_space(ctx=CTX, space=leaving)


def expected_counts(tenant) -> dict:
    """{space name: Counter(phase)} from address_status, address by address."""
    spaces = list(AddressSpace.objects.filter(tenant=tenant))
    states = agent_states(s.uid for s in spaces)
    return {s.name: Counter(address_status(s, a, states.get(s.uid, {})).phase
                            for a in s.addresses.all()) for s in spaces}


@pytest.mark.parametrize("infra_backend, router_enabled", [
    ("local", True), ("kubernetes", True), ("local", False)])
def test_every_phase_count_is_what_address_status_says(client, tenant, fleet, settings,
                                                      infra_backend, router_enabled):
    settings.MAAS_INFRA_BACKEND, settings.MAAS_ROUTER_ENABLED = infra_backend, router_enabled
    expected = expected_counts(tenant)
    figures = gauges(client)
    assert set().union(*expected.values()) == set(PHASES)  # the fleet covers every phase
    assert {
        name: {p: figures[(f"enmasse_addresses_{p.lower()}_total", tenant.slug, name)]
               for p in PHASES}
        for name in expected
    } == {name: {p: counts[p] for p in PHASES} for name, counts in expected.items()}
    assert {name: (figures[("enmasse_addresses_total", tenant.slug, name)],
                   figures[("enmasse_addresses_ready_total", tenant.slug, name)],
                   figures[("enmasse_addresses_not_ready_total", tenant.slug, name)])
            for name in expected} == {
        name: (c.total(), c["Active"], c.total() - c["Active"]) for name, c in expected.items()}


def test_the_fleet_covers_failed_configuring_and_active_as_intended(tenant, fleet):
    expected = expected_counts(tenant)
    assert expected["stored"] == Counter(Failed=1, Configuring=3, Active=1)
    assert expected["routed"] == Counter(Active=2, Failed=1, Configuring=1, Pending=1)
    assert expected["restarted"] == Counter(Configuring=2)
    assert expected["settled"] == Counter(Active=2, Failed=1, Configuring=1, Pending=1)
    assert expected["lagging"] == Counter(Active=1, Configuring=1)
    assert expected["leaving"] == Counter(Terminating=2)


def grow(tenant, spaces: int, addresses: int) -> None:
    """Brokered spaces s0.. with queues q0.., each with a storage agent behind by one event and
    an error on its first queue, so every part of a scrape has work to do."""
    for i in range(spaces):
        made = AddressSpace.objects.filter(tenant=tenant, name=f"s{i}").first() or space(
            tenant, f"s{i}", "brokered")
        have = made.addresses.count()
        for j in range(have, addresses):
            services.create_address(ctx=CTX, space=made, address=f"q{j}", type="queue",
                                    plan="brokered-queue")
        AgentState.objects.filter(space_uid=made.uid).delete()
        report(made, "storage", upto=made.last_sequence - 1, errors={"q0": True})


def scrape_queries(client) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/metrics").status_code == 200
    return len(queries)


def test_a_scrape_runs_as_many_queries_for_thirty_spaces_as_for_one(client, tenant):
    set_quota(ctx=CTX, tenant=tenant, max_address_spaces=None)
    grow(tenant, spaces=1, addresses=2)
    small = scrape_queries(client)
    grow(tenant, spaces=30, addresses=20)
    large = scrape_queries(client)
    assert gauges(client)[("enmasse_addresses_total", tenant.slug, "s29")] == 20
    assert large == small
    # spaces, agent states, 3 for phases (the counts, the spaces behind, the errors), the outbox,
    # latency 2, throttled, usage job
    assert small <= 10


def test_a_scrape_where_every_agent_caught_up_reads_no_address_row(client, tenant):
    """The addresses are counted by space and type from the indexes; none is read row by row
    unless an agent is behind in its space (at 100,000 addresses, reading them all was most of
    a scrape)."""
    made = space(tenant, "s", "brokered", q0=("queue", "brokered-queue"),
                 q1=("queue", "brokered-queue"))
    report(made, "storage")
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/metrics").status_code == 200
    reads = [q["sql"] for q in queries if re.search(r"config_service_address\b", q["sql"])]
    assert len(reads) == 1 and "count(*)" in reads[0] and "union all" in reads[0], reads
    assert gauges(client)[("enmasse_addresses_ready_total", tenant.slug, "s")] == 2


def address_reads(client) -> list[dict]:
    """The statements of one scrape that read the address table."""
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/metrics").status_code == 200
    return [q for q in queries if re.search(r"config_service_address\b", q["sql"])]


def test_a_scrape_counts_again_only_the_spaces_whose_sequence_moved(client, tenant):
    """Each process keeps its counts of a space's addresses with the space's last sequence:
    a scrape with no change since the last reads no address row, and after a change it counts
    that space alone, and counts it right (at 100k, counting all was 31 ms of every scrape)."""
    set_quota(ctx=CTX, tenant=tenant, max_address_spaces=None)
    quiet = space(tenant, "quiet", "brokered", q0=("queue", "brokered-queue"))
    busy = space(tenant, "busy", "brokered", q0=("queue", "brokered-queue"))
    report(quiet, "storage")
    report(busy, "storage")
    assert len(address_reads(client)) == 1
    assert address_reads(client) == []
    assert gauges(client)[("enmasse_addresses_total", tenant.slug, "busy")] == 1

    services.create_address(ctx=CTX, space=busy, address="q1", type="queue",
                            plan="brokered-queue")
    # the counts (a union of two), besides the addresses behind: the agent has not applied q1
    counts = [q["sql"] for q in address_reads(client) if "union all" in q["sql"]]
    assert len(counts) == 1 and f"'{{{busy.pk}}}'" in counts[0], counts
    figures = gauges(client)
    assert figures[("enmasse_addresses_total", tenant.slug, "busy")] == 2
    assert figures[("enmasse_addresses_total", tenant.slug, "quiet")] == 1

    services.delete_address(ctx=CTX, space=busy, name="busy.q0")
    assert gauges(client)[("enmasse_addresses_total", tenant.slug, "busy")] == 1


def test_the_counts_of_a_deleted_space_are_forgotten(client, tenant):
    made = space(tenant, "gone", "brokered", q0=("queue", "brokered-queue"))
    assert client.get("/metrics").status_code == 200
    assert made.pk in status._counted
    AddressSpace.objects.filter(pk=made.pk).delete()
    assert client.get("/metrics").status_code == 200
    assert made.pk not in status._counted


def test_an_address_made_between_a_scrapes_statements_makes_no_figure_negative(tenant,
                                                                              monkeypatch):
    """The counts and the addresses behind are read in two statements. A change committed
    between them cannot be timed in a test: emulated by a `_late` that saw two addresses more
    than the counts did."""
    made = space(tenant, "s", "brokered", q0=("queue", "brokered-queue"))
    report(made, "storage", upto=0)  # behind on everything: counted row by row
    seen = status._late
    monkeypatch.setattr(status, "_late", lambda *args: {
        key: {kinds: n + 2 for kinds, n in late.items()} for key, late in seen(*args).items()})
    counts = phase_counts([made], agent_states([made.uid]))[made.pk]
    assert counts == {**dict.fromkeys(PHASES, 0), "Configuring": 1}


def histogram(latency: AppliedLatency) -> dict:
    """{(sample name, agent, le): value} of the latency family."""
    return {(s.name, s.labels["agent"], s.labels.get("le")): s.value
            for s in latency.family().samples}


def whole_table() -> dict:
    """The histogram computed from every AppliedEvent row at once."""
    out = {}
    for kind in AppliedEvent.objects.values_list("kind", flat=True).distinct():
        rows = list(AppliedEvent.objects.filter(kind=kind).values_list("latency_seconds",
                                                                       flat=True))
        for b in BUCKETS:
            out[("maas_event_apply_latency_seconds_bucket", kind, str(b))] = sum(
                r <= b for r in rows)
        out[("maas_event_apply_latency_seconds_bucket", kind, "+Inf")] = len(rows)
        out[("maas_event_apply_latency_seconds_count", kind, None)] = len(rows)
        out[("maas_event_apply_latency_seconds_sum", kind, None)] = pytest.approx(sum(rows))
    return out


def applied(events, kind, age: timedelta, latency: float) -> None:
    AppliedEvent.objects.bulk_create([
        AppliedEvent(event=e, kind=kind, applied_at=timezone.now() - age,
                     latency_seconds=latency * (i + 1)) for i, e in enumerate(events)])


def test_the_latency_histogram_kept_per_process_equals_the_whole_table(tenant):
    space(tenant, "timed", "brokered", **{f"q{i}": ("queue", "brokered-queue") for i in range(6)})
    events = list(ConfigEvent.objects.filter(tenant=tenant).order_by("position"))
    latency = AppliedLatency()
    applied(events[:3], "storage", timedelta(minutes=5), 0.02)  # settled: folded into sums
    applied(events[3:], "storage", timedelta(0), 0.3)  # recent: read again next scrape
    assert histogram(latency) == whole_table()
    applied(events[:2], "router", timedelta(minutes=5), 4.0)
    applied(events[2:], "router", timedelta(0), 0.004)
    assert histogram(latency) == whole_table()
    assert histogram(latency) == whole_table()  # nothing counted twice


def test_the_latency_histogram_starts_over_when_the_rows_it_counted_are_gone(tenant):
    space(tenant, "timed", "brokered", q0=("queue", "brokered-queue"))
    events = list(ConfigEvent.objects.filter(tenant=tenant).order_by("position"))
    latency = AppliedLatency()
    applied(events, "storage", timedelta(minutes=5), 0.02)
    histogram(latency)
    AppliedEvent.objects.all().delete()
    applied(events[:1], "router", timedelta(minutes=5), 0.5)
    assert histogram(latency) == whole_table()


def test_a_scrape_reports_agent_errors_throttled_tenants_the_outbox_and_the_usage_job(
        client, tenant, fleet):
    import datetime

    from tenants.models import TenantQuota
    from tenants.usage import UsageJobRun

    TenantQuota.objects.filter(tenant=tenant).update(throttled=True)
    UsageJobRun.objects.create(day=datetime.date(2024, 5, 1), status=UsageJobRun.SUCCEEDED,
                               finished_at=timezone.now() - timedelta(days=1))
    failed = UsageJobRun.objects.create(day=datetime.date(2024, 5, 2),
                                        status=UsageJobRun.FAILED, finished_at=timezone.now())
    text = client.get("/metrics").content.decode()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}

    def errors(space_name, agent):
        return samples[("maas_agent_errors", (("addressspace", space_name), ("agent", agent),
                                              ("namespace", tenant.slug)))]

    assert errors("stored", "storage") == 2
    assert errors("routed", "router") == 1
    assert errors("routed", "infra") == 0
    assert samples[("maas_tenant_throttled", (("namespace", tenant.slug),))] == 1
    assert sum(v for (name, labels), v in samples.items() if name == "maas_tenant_throttled") == 1
    assert samples[("maas_usage_job_last_failure_timestamp_seconds", ())] == pytest.approx(
        failed.finished_at.timestamp())
    assert samples[("maas_usage_job_last_success_timestamp_seconds", ())] < samples[
        ("maas_usage_job_last_failure_timestamp_seconds", ())]
    assert samples[("maas_outbox_backlog", ())] > 0
    assert samples[("maas_outbox_oldest_pending_age_seconds", ())] >= 0


def test_the_per_space_text_parses_back_to_every_space_and_label_as_stored(tenant, fleet):
    """The per-space gauges are written without prometheus_client: Prometheus's own parser
    reads them back, labels escaped (names MaaS would refuse, set in memory only) included."""
    spaces = list(AddressSpace.objects.annotate(namespace=F("tenant__slug")).order_by("name"))
    odd = {'say "hi"', "back\\slash", "two\nlines"}
    for made, name in zip(spaces, sorted(odd), strict=False):
        made.name = name
    states = agent_states(s.uid for s in spaces)
    text = per_space_text(spaces, states).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(families) == {"enmasse_address_space_status_ready", "maas_agent_errors"} | {
        f"enmasse_addresses{part}_total" for part in
        ["", "_ready", "_not_ready", *(f"_{p.lower()}" for p in PHASES)]}
    errors = families.pop("maas_agent_errors")  # a sample per space and agent kind
    assert sorted((s.labels["namespace"], s.labels["addressspace"], s.labels["agent"], s.value)
                  for s in errors.samples) == sorted(
        (tenant.slug, s.name, kind, float(len(state.address_errors) + bool(state.space_error)))
        for s in spaces for kind, state in states.get(s.uid, {}).items())
    for family in families.values():
        assert family.type == "gauge"
        key = "name" if family.name == "enmasse_address_space_status_ready" else "addressspace"
        assert sorted((s.labels["namespace"], s.labels[key]) for s in family.samples) == sorted(
            (tenant.slug, s.name) for s in spaces)
    assert odd <= {s.labels["addressspace"] for s in families["enmasse_addresses_total"].samples}
    ready = {s.labels["name"]: s.value
             for s in families["enmasse_address_space_status_ready"].samples}
    assert ready == {s.name: float(space_status(s, states.get(s.uid, {})).is_ready)
                     for s in spaces}


def test_the_per_space_text_is_byte_for_byte_what_prometheus_client_writes(tenant, fleet):
    spaces = list(AddressSpace.objects.annotate(namespace=F("tenant__slug")).order_by("name"))
    spaces[0].name = 'say "hi" \\ twice\n'  # in memory only: MaaS refuses such names
    states = agent_states(s.uid for s in spaces)
    counts = phase_counts(spaces, states)

    class Families:  # the families as prometheus_client's own GaugeMetricFamily holds them
        def collect(self):
            label = ["namespace", "addressspace"]
            for name, text, value in [
                    ("enmasse_addresses_total", "Addresses", lambda c: sum(c.values())),
                    ("enmasse_addresses_ready_total", "Ready addresses", lambda c: c["Active"]),
                    ("enmasse_addresses_not_ready_total", "Addresses not ready",
                     lambda c: sum(c.values()) - c["Active"])] + [
                    (f"enmasse_addresses_{p.lower()}_total", f"Addresses {p}",
                     lambda c, p=p: c[p]) for p in PHASES]:
                family = GaugeMetricFamily(name, text, labels=label)
                for s in spaces:
                    family.add_metric([s.namespace, s.name], value(counts[s.pk]))
                yield family
            ready = GaugeMetricFamily("enmasse_address_space_status_ready",
                                      "1 if the address space is ready",
                                      labels=["namespace", "name"])
            for s in spaces:
                ready.add_metric([s.namespace, s.name],
                                 1 if space_status(s, states.get(s.uid, {})).is_ready else 0)
            yield ready
            errors = GaugeMetricFamily("maas_agent_errors",
                                       "Errors an agent reported for an address space "
                                       "(addresses, plus 1 for a space-wide error)",
                                       labels=["namespace", "addressspace", "agent"])
            for s in spaces:
                for kind, state in sorted(states.get(s.uid, {}).items()):
                    errors.add_metric([s.namespace, s.name, kind],
                                      len(state.address_errors) + (1 if state.space_error else 0))
            yield errors

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Families())
    assert per_space_text(spaces, states) == generate_latest(registry)
