"""Prometheus endpoint with EnMasse's `enmasse_qdr_*` names (off unless a port is given).

The figures come from a prometheus_client collector read at scrape time, in the format
prometheus_client writes. Served from a thread: it only reads integers and sizes the router
thread updates, which is safe enough for monotonic counters under the GIL.
"""

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from . import entities as E

logger = logging.getLogger(__name__)

# qdrouterd's router-wide figures: (name, help, value of the engine); gauges, then counters.
GAUGES = (
    ("enmasse_qdr_connections_total", "Open connections", lambda e: len(e.loop.conns)),
    ("enmasse_qdr_links_total", "Attached links", lambda e: len(e.links)),
    ("enmasse_qdr_addresses_total", "Addresses known to the router", lambda e: len(e.fwd.nodes)),
    ("enmasse_qdr_auto_links_total", "Auto links configured",
     lambda e: e.store.count(E.AUTO_LINK)),
    ("enmasse_qdr_link_routes_total", "Link routes configured",
     lambda e: e.store.count(E.LINK_ROUTE)),
    ("enmasse_qdr_routers_total", "Routers in the network", lambda e: 1),
)
COUNTERS = (
    ("enmasse_qdr_accepted_deliveries_total", "Deliveries accepted",
     lambda e: e.counts.accepted),
    ("enmasse_qdr_released_deliveries_total", "Deliveries released",
     lambda e: e.counts.released),
    ("enmasse_qdr_rejected_deliveries_total", "Deliveries rejected",
     lambda e: e.counts.rejected),
    ("enmasse_qdr_modified_deliveries_total", "Deliveries modified",
     lambda e: e.counts.modified),
    ("enmasse_qdr_presettled_deliveries_total", "Deliveries presettled",
     lambda e: e.counts.presettled),
    ("enmasse_qdr_dropped_presettled_deliveries_total", "Presettled deliveries dropped",
     lambda e: e.counts.dropped_presettled),
    ("enmasse_qdr_deliveries_ingress_total", "Deliveries received from clients",
     lambda e: e.counts.ingress),
    ("enmasse_qdr_deliveries_egress_total", "Deliveries sent to clients",
     lambda e: e.counts.egress),
    # One router, no inter-router links: nothing ever transits.
    ("enmasse_qdr_deliveries_transit_total", "Deliveries through to another router",
     lambda e: 0),
)


class RouterCollector:
    """The engine's figures, read at each scrape."""

    def __init__(self, engine) -> None:
        self.engine = engine

    def collect(self):
        for name, doc, value in GAUGES:
            yield GaugeMetricFamily(name, doc, value=value(self.engine))
        for name, doc, value in COUNTERS:
            yield CounterMetricFamily(name, doc, value=value(self.engine))
        admission = self.engine.admission
        yield GaugeMetricFamily("maas_router_connections_authenticating",
                                "Client connections not yet through SASL",
                                value=admission.pending)
        refused = CounterMetricFamily("maas_router_connections_refused_total",
                                      "Client connections closed at accept, by the limit hit",
                                      labels=["reason"])
        for reason in admission.REASONS:
            refused.add_metric([reason], admission.refused[reason])
        yield refused
        yield CounterMetricFamily("maas_router_logins_failed_total",
                                  "Client logins the auth service refused",
                                  value=admission.failures_total)


def registry_for(engine) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RouterCollector(engine))
    return registry


def render(engine) -> str:
    return generate_latest(registry_for(engine)).decode()


def serve(engine, host: str, port: int) -> ThreadingHTTPServer:
    registry = registry_for(engine)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's naming)
            if self.path not in ("/metrics", "/"):
                self.send_error(404)
                return
            body = generate_latest(registry)
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_PLAIN_0_0_4)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt, *args):
            return

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    logger.info("router.metrics_listening", extra={"host": host, "port": port})
    return server
