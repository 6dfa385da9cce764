"""Command line entry point: `python -m workers.router [options]`.

Starts the listeners (AMQP, optional AMQPS, management, optional metrics) and runs the loop
until SIGTERM/SIGINT. The admin credentials of the management listener may come from the
environment (MAAS_ROUTER_ADMIN_USER / MAAS_ROUTER_ADMIN_PASSWORD) to keep them off `ps`.
"""

import argparse
import logging
import os
import signal
import sys

from cproton import pn_ssl_domain_set_credentials
from cproton_ffi import lib as L

from .engine import Engine
from .metrics_http import serve

logger = logging.getLogger("workers.router")


def parse_args(argv=None) -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(prog="python -m workers.router", description=__doc__)
    p.add_argument("--host", default=env("MAAS_ROUTER_HOST", "127.0.0.1"))
    p.add_argument("--amqp-port", type=int, default=int(env("MAAS_ROUTER_AMQP_PORT", "5673")))
    p.add_argument("--amqps-port", type=int,
                   default=int(env("MAAS_ROUTER_AMQPS_PORT", "5674")),
                   help="TLS listener; only started when --tls-cert and --tls-key are given")
    p.add_argument("--tls-cert", default=env("MAAS_ROUTER_TLS_CERT"))
    p.add_argument("--tls-key", default=env("MAAS_ROUTER_TLS_KEY"))
    p.add_argument("--management-host", default=env("MAAS_ROUTER_MANAGEMENT_HOST", "127.0.0.1"))
    p.add_argument("--management-port", type=int,
                   default=int(env("MAAS_ROUTER_MANAGEMENT_PORT", "5675")))
    p.add_argument("--admin-user", default=env("MAAS_ROUTER_ADMIN_USER", "admin"))
    p.add_argument("--admin-password", default=env("MAAS_ROUTER_ADMIN_PASSWORD"),
                   help="PLAIN password of the management listener; without it that "
                        "loopback listener accepts ANONYMOUS")
    p.add_argument("--metrics-port", type=int, default=int(env("MAAS_ROUTER_METRICS_PORT", "0")),
                   help="Prometheus text endpoint; 0 (default) disables it")
    # Loopback by default, apart from --host: a router whose AMQP listener faces the tenants
    # need not show them its traffic counters too.
    p.add_argument("--metrics-host", default=env("MAAS_ROUTER_METRICS_HOST", "127.0.0.1"))
    p.add_argument("--log-level", default=env("MAAS_ROUTER_LOG_LEVEL", "INFO"))
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if args.management_host not in ("127.0.0.1", "::1", "localhost") and not args.admin_password:
        logger.error("router.insecure_management", extra={"host": args.management_host})
        return 2
    engine = Engine(admin_user=args.admin_user, admin_password=args.admin_password)
    engine.listen(args.host, args.amqp_port, "client")
    if args.tls_cert and args.tls_key:
        domain = L.pn_ssl_domain(L.PN_SSL_MODE_SERVER)
        if pn_ssl_domain_set_credentials(domain, args.tls_cert, args.tls_key, None) != 0:
            logger.error("router.bad_tls_credentials", extra={"cert": args.tls_cert})
            return 2
        engine.listen(args.host, args.amqps_port, "client", ssl_domain=domain)
    engine.listen(args.management_host, args.management_port, "management")
    if args.metrics_port:
        serve(engine, args.metrics_host, args.metrics_port)

    def stop(signum, frame):
        engine.loop.running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    logger.info("router.started", extra={"amqp_port": args.amqp_port,
                                         "management_port": args.management_port})
    engine.loop.run()
    logger.info("router.stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
