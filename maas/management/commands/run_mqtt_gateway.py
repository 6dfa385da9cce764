"""manage.py run_mqtt_gateway: the MQTT gateway of standard spaces (dataplane/gateway,
docs/mqtt.md) with the control plane's store; the settings are the defaults."""
import asyncio
import logging
import os
import sys

from django.conf import settings
from django.core.management.base import BaseCommand

from config_service import routers
from dataplane.admission import Limits
from dataplane.gateway.process import Options, serve
from maas.bindings import GatewayStore


def _host_port(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return host.strip("[]"), int(port)


def _mesh(host: str, tls: bool) -> list[tuple[str, int]]:
    """The AMQP (`tls`: AMQPS) listeners of the local mesh's routers after the first, at
    `host`."""
    return [(host, r.amqps_port if tls else r.amqp_port) for r in routers.local_routers()[1:]]


def _router_ca() -> str | None:
    """The routers' certificate the gateway checks, where it reaches them over TLS: the
    platform's (MAAS_ROUTER_TLS_CERT, which make run's routers present on AMQPS)."""
    cert = settings.MAAS_ROUTER_TLS_CERT
    if settings.MAAS_MQTT_GATEWAY_ROUTER_TLS and cert and os.path.exists(cert):
        return cert
    return None


class Command(BaseCommand):
    help = "Run the MQTT gateway (MQTT and MQTTS) in front of the standard spaces' router."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=settings.MAAS_MQTT_GATEWAY_HOST)
        parser.add_argument("--port", type=int, default=settings.MAAS_MQTT_GATEWAY_PORT)
        parser.add_argument("--tls-port", type=int, default=settings.MAAS_MQTT_GATEWAY_TLS_PORT,
                            help="MQTTS; started when the certificate and key exist")
        parser.add_argument("--tls-cert", default=settings.MAAS_ROUTER_TLS_CERT)
        parser.add_argument("--tls-key", default=settings.MAAS_ROUTER_TLS_KEY)
        parser.add_argument("--router", type=_host_port, default=None,
                            help="HOST:PORT of the router's AMQP listener (AMQPS with "
                                 "--router-ca); default: the settings' router, on AMQPS where "
                                 "MAAS_MQTT_GATEWAY_ROUTER_TLS and its certificate say so")
        parser.add_argument("--router-ca", default=None,
                            help="PEM the routers' certificate is checked against: TLS to "
                                 "--router and --more-router")
        # The other routers of the local mesh (MAAS_ROUTER_MESH, config_service.routers).
        parser.add_argument("--more-router", type=_host_port, action="append",
                            dest="more_routers", default=None,
                            help="HOST:PORT of another router of the mesh, tried in order "
                                 "when the first does not answer (repeat; default: the "
                                 "local mesh's)")
        parser.add_argument("--metrics-host", default=settings.MAAS_MQTT_GATEWAY_METRICS_HOST)
        parser.add_argument("--metrics-port", type=int,
                            default=settings.MAAS_MQTT_GATEWAY_METRICS_PORT,
                            help="Prometheus /metrics; 0: none")
        parser.add_argument("--log-level",
                            default=os.environ.get("MAAS_MQTT_GATEWAY_LOG_LEVEL", "INFO"))

    def handle(self, *, log_level, **o):
        logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s %(message)s")
        logging.getLogger("dataplane.gateway").setLevel(log_level.upper())
        limits = Limits(pending_per_source=settings.MAAS_PENDING_PER_HOST,
                        pending_total=settings.MAAS_PENDING_TOTAL,
                        rate_per_source=settings.MAAS_CONNECT_RATE_PER_HOST,
                        burst_per_source=settings.MAAS_CONNECT_BURST_PER_HOST)
        router, router_ca = o["router"], o["router_ca"]
        if router is None:  # the settings' router: over TLS unless they say otherwise
            router_ca = router_ca or _router_ca()
            router = (settings.MAAS_MQTT_GATEWAY_ROUTER_HOST,
                      settings.MAAS_ROUTER_AMQPS_PORT if router_ca else
                      settings.MAAS_ROUTER_AMQP_PORT)
        options = Options(host=o["host"], port=o["port"], router=router, router_ca=router_ca,
                          tls_port=o["tls_port"], tls_cert=o["tls_cert"], tls_key=o["tls_key"],
                          metrics_host=o["metrics_host"], metrics_port=o["metrics_port"],
                          limits=limits, handshake_timeout=settings.MAAS_HANDSHAKE_TIMEOUT,
                          more_routers=tuple(o["more_routers"] if o["more_routers"] is not None
                                             else _mesh(router[0], bool(router_ca))))
        sys.exit(asyncio.run(serve(options, GatewayStore())))
