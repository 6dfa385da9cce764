"""The metrics endpoint: Prometheus text that a Prometheus parser reads, EnMasse's names."""

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from proton import Message

from .conftest import ADDRESS, add_tenant, pump_until

GAUGES = {f"enmasse_qdr_{n}_total" for n in (
    "connections", "links", "addresses", "auto_links", "link_routes", "routers")}
COUNTERS = {f"enmasse_qdr_{n}_deliveries_total" for n in (
    "accepted", "released", "rejected", "modified", "presettled", "dropped_presettled")} | {
    f"enmasse_qdr_deliveries_{n}_total" for n in ("ingress", "egress", "transit")}
# Our own, beside EnMasse's: logins in flight and the connections refused against abuse.
MAAS_GAUGES = {"maas_router_connections_authenticating"}
MAAS_COUNTERS = {"maas_router_connections_refused_total", "maas_router_logins_failed_total"}


@pytest.fixture(scope="module", autouse=True)
def tenant(mgmt):
    add_tenant(mgmt, "met", {"mia": "mia-pw"},
               {"all": {"users": "mia", "sources": "*", "targets": "*"}})
    mgmt.create(ADDRESS, "met-any", prefix="met/any", distribution="balanced")


def scrape(router) -> dict[str, tuple[str, float]]:
    """{sample name: (family type, value)}, parsed by prometheus_client's own parser."""
    resp = requests.get(f"http://127.0.0.1:{router.metrics_port}/metrics", timeout=5)
    assert resp.status_code == 200
    assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return {sample.name: (family.type, sample.value)
            for family in text_string_to_metric_families(resp.text)
            for sample in family.samples}


def test_every_enmasse_name_parses_with_its_type(router):
    metrics = scrape(router)
    assert set(metrics) == GAUGES | COUNTERS | MAAS_GAUGES | MAAS_COUNTERS
    assert {n for n, (kind, _) in metrics.items() if kind == "gauge"} == GAUGES | MAAS_GAUGES
    assert {n for n, (kind, _) in metrics.items() if kind == "counter"} == (
        COUNTERS | MAAS_COUNTERS)
    assert metrics["enmasse_qdr_routers_total"] == ("gauge", 1)
    assert metrics["enmasse_qdr_deliveries_transit_total"] == ("counter", 0)
    assert metrics["enmasse_qdr_connections_total"][1] >= 1  # the management client's


def test_counters_follow_the_traffic(router):
    before = scrape(router)
    s_conn = router.connect("mia", "mia-pw", vhost="met")
    r_conn = router.connect("mia", "mia-pw", vhost="met")
    try:
        receiver = r_conn.create_receiver("any/counted", credit=10)
        sender = s_conn.create_sender("any/counted")
        pump_until(lambda: sender.link.credit > 0, s_conn, r_conn)
        during = scrape(router)
        deliveries = [sender.link.send(Message(body=i)) for i in range(3)]
        pump_until(lambda: len(receiver.fetcher.incoming) == 3, s_conn, r_conn)
        for _ in range(3):
            receiver.receive(1)
            receiver.accept()
        pump_until(lambda: all(d.settled for d in deliveries), s_conn, r_conn)
        after = scrape(router)
    finally:
        s_conn.close()
        r_conn.close()

    def grew(name, a, b):
        return b[name][1] - a[name][1]

    assert grew("enmasse_qdr_connections_total", before, during) == 2
    assert grew("enmasse_qdr_links_total", before, during) == 2
    for name in ("enmasse_qdr_accepted_deliveries_total", "enmasse_qdr_deliveries_ingress_total",
                 "enmasse_qdr_deliveries_egress_total"):
        assert grew(name, during, after) == 3, name
    assert grew("enmasse_qdr_rejected_deliveries_total", during, after) == 0


def test_other_paths_are_not_found(router):
    resp = requests.get(f"http://127.0.0.1:{router.metrics_port}/other", timeout=5)
    assert resp.status_code == 404
