"""Command line entry point: `python -m dataplane.router [options]`.

Starts the listeners (AMQP, optional AMQPS, management, optional metrics) and runs the loop
until SIGTERM/SIGINT, then journals the usage counters (with `--state-dir`) and exits. With
`--state-dir` the configuration management created is journalled too and restored before any
listener opens. Every listener relays SASL to the MaaS auth service (`--auth-service`); the
management listener admits only the identity `--admin-user`.
"""

import argparse
import logging
import os
import signal
import ssl
import sys

from ..admission import Limits
from ..server_names import ServerNames
from . import memory
from .engine import SWEEP_AFTER, Engine
from .metrics_http import serve
from .sasl_relay import CLIENT_TIMEOUT, AuthService

logger = logging.getLogger("dataplane.router")


def _host_port(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError("expected HOST:PORT")
    return host.strip("[]"), int(port)


def parse_args(argv=None) -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(prog="python -m dataplane.router", description=__doc__)
    p.add_argument("--host", default=env("MAAS_ROUTER_HOST", "127.0.0.1"))
    p.add_argument("--amqp-port", type=int, default=int(env("MAAS_ROUTER_AMQP_PORT", "5673")))
    p.add_argument("--amqps-port", type=int,
                   default=int(env("MAAS_ROUTER_AMQPS_PORT", "5674")),
                   help="TLS listener; only started when --tls-cert and --tls-key are given")
    p.add_argument("--tls-cert", default=env("MAAS_ROUTER_TLS_CERT"))
    p.add_argument("--tls-key", default=env("MAAS_ROUTER_TLS_KEY"))
    p.add_argument("--space-tls-dir", default=env("MAAS_SPACE_TLS_DIR") or None,
                   help="where the workers put spaces' endpoint certificates (<host>/tls.crt, "
                        "tls.key): AMQPS answers a client's SNI host with its space's")
    p.add_argument("--management-host", default=env("MAAS_ROUTER_MANAGEMENT_HOST", "127.0.0.1"))
    p.add_argument("--management-port", type=int,
                   default=int(env("MAAS_ROUTER_MANAGEMENT_PORT", "5675")))
    p.add_argument("--admin-user", default=env("MAAS_ROUTER_ADMIN_USER", "admin"),
                   help="the only identity the management listener admits")
    p.add_argument("--auth-service", type=_host_port,
                   default=(env("MAAS_AUTH_SERVICE_HOST", "127.0.0.1"),
                            int(env("MAAS_AUTH_SERVICE_PORT", "5676"))),
                   help="HOST:PORT of the MaaS auth service every listener relays SASL to")
    p.add_argument("--auth-service-ca", default=env("MAAS_AUTH_SERVICE_CA") or None,
                   help="PEM of the CA that certifies the auth service: TLS to it, and only to "
                        "a service that proves that identity for its host name")
    p.add_argument("--management-tls", action="store_true",
                   default=env("MAAS_ROUTER_MANAGEMENT_TLS", "").lower() in ("1", "true"),
                   help="the management listener requires TLS, with --tls-cert/--tls-key: the "
                        "router admin's password never crosses in clear text")
    p.add_argument("--broker-ca", default=env("MAAS_ROUTER_BROKER_CA") or None,
                   help="PEM CA of the brokers' TLS listeners: the client sslProfile `broker` "
                        "that connectors name to reach them over TLS")
    p.add_argument("--metrics-port", type=int, default=int(env("MAAS_ROUTER_METRICS_PORT", "0")),
                   help="Prometheus text endpoint; 0 (default) disables it")
    # Loopback by default, apart from --host: a router whose AMQP listener faces the tenants
    # need not show them its traffic counters too.
    p.add_argument("--metrics-host", default=env("MAAS_ROUTER_METRICS_HOST", "127.0.0.1"))
    p.add_argument("--state-dir", default=env("MAAS_ROUTER_STATE_DIR") or None,
                   help="where the usage counters (every second) and the configuration (every "
                        "change) are journalled and read back at start; none (default): they "
                        "live in memory only")
    p.add_argument("--usage-sweep-after", type=float,
                   default=float(env("MAAS_ROUTER_USAGE_SWEEP_AFTER", str(SWEEP_AFTER))),
                   help="seconds after the start before usage counters of unconfigured "
                        "addresses are swept (the agents configure a new router meanwhile)")
    p.add_argument("--handshake-timeout", type=float,
                   default=float(env("MAAS_HANDSHAKE_TIMEOUT", str(CLIENT_TIMEOUT))),
                   help="seconds a client has for TLS and SASL; then it is closed")
    defaults = Limits()
    p.add_argument("--pending-per-host", type=int,
                   default=int(env("MAAS_PENDING_PER_HOST", defaults.pending_per_source)),
                   help="connections still authenticating, per source address")
    p.add_argument("--pending-total", type=int,
                   default=int(env("MAAS_PENDING_TOTAL", defaults.pending_total)),
                   help="connections still authenticating, over every source")
    p.add_argument("--connect-rate-per-host", type=float,
                   default=float(env("MAAS_CONNECT_RATE_PER_HOST",
                                     defaults.rate_per_source)),
                   help="new connections a second per source address, on average")
    p.add_argument("--connect-burst-per-host", type=float,
                   default=float(env("MAAS_CONNECT_BURST_PER_HOST",
                                     defaults.burst_per_source)),
                   help="new connections per source address at once")
    p.add_argument("--log-level", default=env("MAAS_ROUTER_LOG_LEVEL", "INFO"))
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    memory.bound_large_allocations()
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    limits = Limits(pending_per_source=args.pending_per_host, pending_total=args.pending_total,
                    rate_per_source=args.connect_rate_per_host,
                    burst_per_source=args.connect_burst_per_host)
    engine = Engine(AuthService(*args.auth_service, ca_file=args.auth_service_ca),
                    admin_user=args.admin_user,
                    sweep_after=args.usage_sweep_after, limits=limits,
                    handshake_timeout=args.handshake_timeout)
    if args.broker_ca:
        if not os.path.exists(args.broker_ca):
            logger.error("router.bad_broker_ca", extra={"ca": args.broker_ca})
            return 2
        engine.client_profiles["broker"] = args.broker_ca
    if args.state_dir:
        try:
            engine.ledger.open_journal(args.state_dir)
            engine.management.open_journal(args.state_dir)
        except OSError:
            logger.exception("router.bad_state_dir", extra={"state_dir": args.state_dir})
            return 2
    engine.listen(args.host, args.amqp_port, "client")
    management_tls = None
    if args.tls_cert and args.tls_key:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(args.tls_cert, args.tls_key)
        except (OSError, ssl.SSLError):
            logger.error("router.bad_tls_credentials", extra={"cert": args.tls_cert})
            return 2
        if args.management_tls:  # the platform's own certificate, never a space's by SNI
            management_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            management_tls.load_cert_chain(args.tls_cert, args.tls_key)
        if args.space_tls_dir:
            ServerNames(args.space_tls_dir).install(context)
        engine.listen(args.host, args.amqps_port, "client", ssl_context=context)
    elif args.management_tls:
        logger.error("router.management_tls_without_certificate")
        return 2
    engine.listen(args.management_host, args.management_port, "management",
                  ssl_context=management_tls)
    if args.metrics_port:
        serve(engine, args.metrics_host, args.metrics_port)

    def stop(signum, frame):
        engine.loop.running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    logger.info("router.started", extra={"amqp_port": args.amqp_port,
                                         "management_port": args.management_port,
                                         "auth_service": str(engine.auth_service)})
    try:
        engine.loop.run()
    finally:
        engine.ledger.close(engine.counts)  # a graceful stop loses no counted delivery
        if engine.management.journal is not None:
            engine.management.journal.close()
    logger.info("router.stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
