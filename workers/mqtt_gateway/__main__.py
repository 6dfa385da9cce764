"""`python -m workers.mqtt_gateway`: MQTT (default 1885) and MQTTS (8885, with the router's TLS
certificate) in front of the standard spaces' router. Settings: maas/settings.py."""

import argparse
import asyncio
import logging
import os
import signal
import ssl
import sys


def parse_args(argv=None) -> argparse.Namespace:
    from django.conf import settings

    p = argparse.ArgumentParser(prog="python -m workers.mqtt_gateway", description=__doc__)
    p.add_argument("--host", default=settings.MAAS_MQTT_GATEWAY_HOST)
    p.add_argument("--port", type=int, default=settings.MAAS_MQTT_GATEWAY_PORT)
    p.add_argument("--tls-port", type=int, default=settings.MAAS_MQTT_GATEWAY_TLS_PORT,
                   help="MQTTS; started when the certificate and key exist")
    p.add_argument("--tls-cert", default=settings.MAAS_ROUTER_TLS_CERT)
    p.add_argument("--tls-key", default=settings.MAAS_ROUTER_TLS_KEY)
    p.add_argument("--router", default=f"{settings.MAAS_MQTT_GATEWAY_ROUTER_HOST}:"
                                       f"{settings.MAAS_ROUTER_AMQP_PORT}",
                   help="HOST:PORT of the router's AMQP listener")
    p.add_argument("--metrics-host", default=settings.MAAS_MQTT_GATEWAY_METRICS_HOST)
    p.add_argument("--metrics-port", type=int, default=settings.MAAS_MQTT_GATEWAY_METRICS_PORT,
                   help="Prometheus /metrics; 0: none")
    p.add_argument("--log-level", default=os.environ.get("MAAS_MQTT_GATEWAY_LOG_LEVEL", "INFO"))
    return p.parse_args(argv)


async def serve(args) -> int:
    from . import metrics
    from .server import Gateway

    host, _, port = args.router.rpartition(":")
    gateway = Gateway(host, int(port))
    metrics.serve(args.metrics_host, args.metrics_port)
    await gateway.listen(args.host, args.port)
    if args.tls_port and os.path.exists(args.tls_cert or "") and os.path.exists(args.tls_key or ""):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls_cert, args.tls_key)
        await gateway.listen(args.host, args.tls_port, context)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    logging.getLogger("workers.mqtt_gateway").info(
        "mqtt.gateway_started", extra={"port": args.port, "tls_port": args.tls_port,
                                       "router": args.router})
    await stop.wait()
    await gateway.close()
    return 0


def main(argv=None) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "maas.settings")
    import django

    django.setup()
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("workers.mqtt_gateway").setLevel(args.log_level.upper())
    return asyncio.run(serve(args))


if __name__ == "__main__":
    sys.exit(main())
