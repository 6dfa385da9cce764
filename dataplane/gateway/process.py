"""The gateway as a process: MQTT (default 1885) and MQTTS (with the router's TLS certificate)
in front of the standard spaces' router, Prometheus figures beside them, until SIGTERM or
SIGINT. `manage.py run_mqtt_gateway` starts it with the control plane's store (maas/bindings.py)
and the settings as defaults."""

import asyncio
import logging
import os
import signal
import ssl
from dataclasses import dataclass

from .. import tls_files
from ..admission import Limits
from ..control import GatewayStore
from ..server_names import ServerNames
from . import metrics
from .server import HANDSHAKE_TIMEOUT, Gateway

logger = logging.getLogger("dataplane.gateway")


@dataclass(frozen=True)
class Options:
    host: str
    port: int
    router: tuple[str, int]  # the router's AMQP listener
    tls_port: int = 0  # MQTTS; started when the certificate and key exist
    tls_cert: str | None = None
    tls_key: str | None = None
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 0  # Prometheus /metrics; 0: none
    limits: Limits = Limits()  # per source address (dataplane/admission.py)
    handshake_timeout: float = HANDSHAKE_TIMEOUT  # seconds from accept to CONNACK
    more_routers: tuple = ()  # the other routers of the mesh, tried in order after `router`
    # TLS to `router` and `more_routers` (their AMQPS listeners), their certificate checked
    # against this PEM: the clients' passwords the gateway logs in with never cross in clear
    router_ca: str | None = None


async def serve(options: Options, control: GatewayStore) -> int:
    # TLS to the routers: the chain checked against `router_ca` (one machine: the platform's
    # router certificate, self-signed), not the host name, which is whatever address reaches
    # the router here (as qdrouterd checks the auth service)
    ca = options.router_ca
    gateway = Gateway(*options.router, control, limits=options.limits,
                      handshake_timeout=options.handshake_timeout,
                      more_routers=options.more_routers,
                      router_tls=tls_files.ClientContext(ca) if ca else None,
                      # a space's own router (Kubernetes) by its internal Service's name, which
                      # its certificate of the internal CA names
                      space_router_tls=tls_files.ClientContext(ca, check_hostname=True)
                      if ca else None)
    metrics.serve(options.metrics_host, options.metrics_port)
    await gateway.listen(options.host, options.port)
    cert, key = options.tls_cert or "", options.tls_key or ""
    if options.tls_port and os.path.exists(cert) and os.path.exists(key):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        # Spaces' own certificates by SNI, looked up in the control plane's database, which
        # the gateway reaches wherever it runs (the workers' files are on their machine).
        ServerNames(lookup=control.certificate).install(context)
        await gateway.listen(options.host, options.tls_port, context)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    logger.info("mqtt.gateway_started", extra={"port": options.port,
                                               "tls_port": options.tls_port,
                                               "router": f"{options.router[0]}:{options.router[1]}",
                                               "router_tls": bool(options.router_ca)})
    await stop.wait()
    await gateway.close()
    return 0
