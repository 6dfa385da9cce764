"""`python -m dataplane.vhost_relay`: options (or environment), JSON log lines, run until
SIGTERM/SIGINT."""
import argparse
import asyncio
import json
import logging
import os
import signal
import ssl
import sys

from ..admission import Admission, Limits
from ..server_names import Lookup, ServerNames
from . import __doc__ as description
from .kinds import Kinds
from .relay import Relay

logger = logging.getLogger("dataplane.vhost_relay")


def host_port(text: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:PORT` for IPv6)."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def listen_address(text: str) -> tuple[str, int] | None:
    """`HOST:PORT`, or `none`: no plain listener."""
    return None if text == "none" else host_port(text)


def parse_args(argv=None) -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(prog="python -m dataplane.vhost_relay", description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", type=listen_address, metavar="HOST:PORT", default=host_port(
        f"{env('MAAS_VHOST_RELAY_HOST', '127.0.0.1')}:{env('MAAS_VHOST_RELAY_PORT', '5677')}"),
        help="where routers connect (MAAS_VHOST_RELAY_HOST/_PORT; 127.0.0.1:5677); `none`: "
             "only the TLS listener")
    p.add_argument("--broker", type=host_port, metavar="HOST:PORT", default=host_port(
        f"{env('RABBITMQ_AMQP_HOST', '127.0.0.1')}:{env('RABBITMQ_AMQP_PORT', '5672')}"),
        help="RabbitMQ's AMQP listener (RABBITMQ_AMQP_HOST/_PORT; 127.0.0.1:5672)")
    p.add_argument("--more-broker", type=host_port, metavar="HOST:PORT", action="append",
                   dest="more_brokers", default=[],
                   help="another node of the broker's cluster, tried when the others do not "
                        "answer (repeat)")
    p.add_argument("--protocol", choices=("amqp", "brokered-amqp", "mqtt"), default="amqp",
                   help="amqp: routers' logins to their vhost; brokered-amqp: tenants' AMQP "
                        "clients of brokered spaces, bare address names rewritten; mqtt: "
                        "tenants' MQTT clients, their client ids scoped to their vhost "
                        "(docs/storage.md)")
    p.add_argument("--tls-listen", type=host_port, metavar="HOST:PORT",
                   help="also listen here with TLS (AMQPS, MQTTS), with --tls-cert/--tls-key")
    p.add_argument("--broker-ca", default=env("MAAS_VHOST_RELAY_BROKER_CA", ""),
                   help="connect to the broker (and its other nodes) with TLS, its certificate "
                        "checked against this PEM CA and the broker's host; their ports are "
                        "then its TLS listeners'")
    p.add_argument("--tls-cert", default=env("MAAS_VHOST_RELAY_TLS_CERT", ""),
                   help="PEM certificate chain of the TLS listener")
    p.add_argument("--tls-key", default=env("MAAS_VHOST_RELAY_TLS_KEY", ""),
                   help="PEM private key of the TLS listener")
    p.add_argument("--space-tls-dir", default=env("MAAS_SPACE_TLS_DIR", ""),
                   help="spaces' endpoint certificates (<host>/tls.crt, tls.key): the TLS "
                        "listener answers a client's SNI host with its space's")
    p.add_argument("--api-url", default=env("RABBITMQ_API_URL", "http://127.0.0.1:15672/api"),
                   help="brokered-amqp: the broker's management API, where the relay reads "
                        "which names are topics (RABBITMQ_API_URL; user and password from "
                        "RABBITMQ_API_USER/_PASSWORD)")
    p.add_argument("--connect-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="to the broker, after which the client's connection is closed")
    # MQTT and brokered AMQP face tenants: the same per-source limits as the router's and the gateway's
    # listeners (maas/settings.py), read from the same variables.
    p.add_argument("--handshake-timeout", type=float, metavar="SECONDS",
                   default=float(env("MAAS_HANDSHAKE_TIMEOUT", "5")),
                   help="tenants (mqtt, brokered-amqp): a client without its CONNECT or open "
                        "by then is closed (MAAS_HANDSHAKE_TIMEOUT; 5)")
    p.add_argument("--pending-per-host", type=int, default=int(env("MAAS_PENDING_PER_HOST", "64")),
                   help="tenants: connections before their CONNECT or open per source address "
                        "(64)")
    p.add_argument("--connect-rate", type=float,
                   default=float(env("MAAS_CONNECT_RATE_PER_HOST", "100")),
                   help="tenants: new connections a second per source address (100)")
    p.add_argument("--connect-burst", type=float,
                   default=float(env("MAAS_CONNECT_BURST_PER_HOST", "200")),
                   help="tenants: new connections at once per source address (200)")
    p.add_argument("--log-level", default=env("MAAS_VHOST_RELAY_LOG_LEVEL", "INFO"))
    return p.parse_args(argv)


def tls_context(args: argparse.Namespace, lookup: Lookup | None = None) -> ssl.SSLContext | None:
    """The TLS listener's context; None without one, or without its certificate files (on
    Kubernetes an optional Secret: plain only until it exists, as the MQTT gateway)."""
    if args.tls_listen is None:
        return None
    if not (os.path.exists(args.tls_cert) and os.path.exists(args.tls_key)):
        logger.warning("vhost_relay.tls_off", extra={"cert": args.tls_cert, "key": args.tls_key})
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(args.tls_cert, args.tls_key)
    if lookup is not None:  # manage.py run_vhost_relay: the control plane's database
        ServerNames(lookup=lookup).install(context)
    elif args.space_tls_dir:
        ServerNames(args.space_tls_dir).install(context)
    return context


def broker_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """TLS to the broker, checked against `--broker-ca`; None: plain."""
    if not args.broker_ca:
        return None
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=args.broker_ca)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def api_password() -> str:
    """RABBITMQ_API_PASSWORD, or the file RABBITMQ_API_PASSWORD_FILE names (as the settings)."""
    path = os.environ.get("RABBITMQ_API_PASSWORD_FILE")
    if path:
        with open(path) as f:
            return f.read().strip()
    return os.environ.get("RABBITMQ_API_PASSWORD", "guest")


async def serve(args: argparse.Namespace, lookup: Lookup | None = None) -> None:
    tenants = args.protocol != "amqp"  # faced by tenants' clients, not by routers
    env = os.environ.get
    relay = Relay(*args.broker, connect_timeout=args.connect_timeout, protocol=args.protocol,
                  admission=Admission(Limits(
                      pending_per_source=args.pending_per_host, rate_per_source=args.connect_rate,
                      burst_per_source=args.connect_burst)) if tenants else None,
                  handshake_timeout=args.handshake_timeout if tenants else 0.0,
                  kinds=Kinds(args.api_url, env("RABBITMQ_API_USER", "guest"), api_password())
                  if args.protocol == "brokered-amqp" else None,
                  more_brokers=tuple(args.more_brokers), broker_tls=broker_context(args))
    tls = tls_context(args, lookup)
    if args.listen is None and tls is None:
        raise OSError("--listen none needs the TLS listener and its certificate")
    if args.listen is not None:
        await relay.start(*args.listen)
    if tls is not None:
        await relay.start(*args.tls_listen, tls=tls)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    logger.info("vhost_relay.started", extra={"protocol": args.protocol,
                                              "listen": "{}:{}".format(*args.listen)
                                              if args.listen else None,
                                              "tls_listen": "{}:{}".format(*args.tls_listen)
                                              if args.tls_listen else None,
                                              "broker": "{}:{}".format(*args.broker),
                                              "broker_tls": bool(args.broker_ca)})
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


def main(argv=None, lookup: Lookup | None = None) -> int:
    """`lookup`: where the TLS listener finds a space's certificate by SNI name, instead of
    `--space-tls-dir` (dataplane/server_names.py)."""
    args = parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=args.log_level.upper(), handlers=[handler])
    try:
        asyncio.run(serve(args, lookup))
    except OSError as exc:  # the listen address is taken or not ours
        logger.error("vhost_relay.listen_failed", extra={"error": str(exc)})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
