"""Prometheus text endpoint with EnMasse's `enmasse_qdr_*` names (off unless a port is given).

Served from a thread: it only reads integers the router thread updates, which is safe enough
for monotonic counters under the GIL.
"""

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import entities as E

logger = logging.getLogger(__name__)


def render(engine) -> str:
    c = engine.counts
    values = {
        "enmasse_qdr_connections_total": len(engine.loop.conns),
        "enmasse_qdr_links_total": len(engine.links),
        "enmasse_qdr_addresses_total": len(engine.fwd.nodes),
        "enmasse_qdr_auto_links_total": len(engine.store.all(E.AUTO_LINK)),
        "enmasse_qdr_link_routes_total": len(engine.store.all(E.LINK_ROUTE)),
        "enmasse_qdr_routers_total": 1,
        "enmasse_qdr_accepted_deliveries_total": c.accepted,
        "enmasse_qdr_released_deliveries_total": c.released,
        "enmasse_qdr_rejected_deliveries_total": c.rejected,
        "enmasse_qdr_modified_deliveries_total": c.modified,
        "enmasse_qdr_presettled_deliveries_total": c.presettled,
        "enmasse_qdr_dropped_presettled_deliveries_total": c.dropped_presettled,
        "enmasse_qdr_deliveries_ingress_total": c.ingress,
        "enmasse_qdr_deliveries_egress_total": c.egress,
        "enmasse_qdr_deliveries_transit_total": 0,
    }
    lines = []
    for name, value in values.items():
        kind = "counter" if "deliveries" in name else "gauge"
        lines.append(f"# TYPE {name} {kind}")
        lines.append(f"{name} {value}")
    return "\n".join(lines) + "\n"


def serve(engine, host: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's naming)
            if self.path not in ("/metrics", "/"):
                self.send_error(404)
                return
            body = render(engine).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt, *args):
            return

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    logger.info("router.metrics_listening", extra={"host": host, "port": port})
    return server
