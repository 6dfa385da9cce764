"""`python -m dataplane.vhost_relay`: options (or environment), JSON log lines, run until
SIGTERM/SIGINT."""
import argparse
import asyncio
import json
import logging
import os
import signal
import sys

from ..admission import Admission, Limits
from . import __doc__ as description
from .relay import Relay

logger = logging.getLogger("dataplane.vhost_relay")


def host_port(text: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:PORT` for IPv6)."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def parse_args(argv=None) -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(prog="python -m dataplane.vhost_relay", description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", type=host_port, metavar="HOST:PORT", default=host_port(
        f"{env('MAAS_VHOST_RELAY_HOST', '127.0.0.1')}:{env('MAAS_VHOST_RELAY_PORT', '5677')}"),
        help="where routers connect (MAAS_VHOST_RELAY_HOST/_PORT; 127.0.0.1:5677)")
    p.add_argument("--broker", type=host_port, metavar="HOST:PORT", default=host_port(
        f"{env('RABBITMQ_AMQP_HOST', '127.0.0.1')}:{env('RABBITMQ_AMQP_PORT', '5672')}"),
        help="RabbitMQ's AMQP listener (RABBITMQ_AMQP_HOST/_PORT; 127.0.0.1:5672)")
    p.add_argument("--protocol", choices=("amqp", "mqtt"), default="amqp",
                   help="amqp: routers' logins to their vhost; mqtt: tenants' MQTT clients, "
                        "their client ids scoped to their vhost (docs/storage.md)")
    p.add_argument("--connect-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="to the broker, after which the client's connection is closed")
    # MQTT faces tenants: the same per-source limits as the router's and the gateway's
    # listeners (maas/settings.py), read from the same variables.
    p.add_argument("--handshake-timeout", type=float, metavar="SECONDS",
                   default=float(env("MAAS_HANDSHAKE_TIMEOUT", "5")),
                   help="mqtt: a client without its CONNECT by then is closed "
                        "(MAAS_HANDSHAKE_TIMEOUT; 5)")
    p.add_argument("--pending-per-host", type=int, default=int(env("MAAS_PENDING_PER_HOST", "64")),
                   help="mqtt: connections before their CONNECT per source address (64)")
    p.add_argument("--connect-rate", type=float,
                   default=float(env("MAAS_CONNECT_RATE_PER_HOST", "100")),
                   help="mqtt: new connections a second per source address (100)")
    p.add_argument("--connect-burst", type=float,
                   default=float(env("MAAS_CONNECT_BURST_PER_HOST", "200")),
                   help="mqtt: new connections at once per source address (200)")
    p.add_argument("--log-level", default=env("MAAS_VHOST_RELAY_LOG_LEVEL", "INFO"))
    return p.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    mqtt = args.protocol == "mqtt"
    relay = Relay(*args.broker, connect_timeout=args.connect_timeout, protocol=args.protocol,
                  admission=Admission(Limits(
                      pending_per_source=args.pending_per_host, rate_per_source=args.connect_rate,
                      burst_per_source=args.connect_burst)) if mqtt else None,
                  handshake_timeout=args.handshake_timeout if mqtt else 0.0)
    await relay.start(*args.listen)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    logger.info("vhost_relay.started", extra={"protocol": args.protocol,
                                              "listen": "{}:{}".format(*args.listen),
                                              "broker": "{}:{}".format(*args.broker)})
    await stopping.wait()
    relay.stop()
    await asyncio.sleep(0.1)  # let the closing transports send what they hold
    logger.info("vhost_relay.stopped")


class JsonFormatter(logging.Formatter):
    """The control plane's log line shape (maas.logs), without importing Django's side."""

    standard = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message"}

    def format(self, record: logging.LogRecord) -> str:
        line = {"time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
                "level": record.levelname, "logger": record.name, "event": record.getMessage()}
        line.update((k, v) for k, v in vars(record).items()
                    if k not in self.standard and not k.startswith("_"))
        return json.dumps(line, default=str)


def main(argv=None) -> int:
    args = parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=args.log_level.upper(), handlers=[handler])
    try:
        asyncio.run(serve(args))
    except OSError as exc:  # the listen address is taken or not ours
        logger.error("vhost_relay.listen_failed", extra={"error": str(exc)})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
