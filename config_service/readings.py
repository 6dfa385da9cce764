"""The data-plane reads the portal and the API show, behind one interface the layer above
registers: a space's live address counters (router and broker), its router's CA certificate,
its clients' connections (with their links), one of which it can close, and the state of its
connectors to remote endpoints.

`config_service` never talks to a router or a broker itself: `workers` (workers/readings.py)
registers the implementation at start-up, and reaches each space's own router and broker through
its endpoints lookup. Without one, the counters are empty and no CA certificate is shown.
"""
import logging
from dataclasses import dataclass, field
from typing import Protocol

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AddressCounters:
    """Raw counters of one space's addresses, keyed by wire name (`broker_object_name`)."""

    # {"in", "out", "senders", "receivers"} per address (standard spaces, through the router)
    router: dict = field(default_factory=dict)
    # RabbitMQ's queue rows: {"messages", "consumers", "message_stats": {"publish", ...}}
    broker: dict = field(default_factory=dict)


# What a Connection's `protocol` and `via` can be.
PROTOCOLS = ["amqp", "amqps", "mqtt", "mqtts", "amqp-0-9-1"]
VIA = ["router", "gateway", "broker"]


@dataclass(frozen=True)
class Link:
    """One link of a client connection: `role` is the client's side (`sender` sends to the
    address, `receiver` receives from it)."""

    name: str
    role: str
    address: str
    metrics: dict  # deliveries, credit, unsettled, accepted, rejected, released, ... (ints)


@dataclass(frozen=True)
class Connection:
    """One client connection of a space, as its router, the protocol gateway (through the
    router) or its broker reports it. `id` is stable while the connection lives and unique in
    the space; `via` says which process holds it: `router`, `gateway` or `broker`."""

    id: str
    hostname: str
    container_id: str
    protocol: str  # amqp, amqps, mqtt, mqtts, amqp-0-9-1, ...
    encrypted: bool
    principal: str  # the messaging user
    sasl_mechanism: str
    via: str
    opened_at: float | None  # UTC seconds
    properties: dict
    metrics: dict  # messagesIn, messagesOut, senders, receivers
    links: tuple = ()


class DataPlane(Protocol):
    def address_counters(self, space) -> AddressCounters:
        """The space's counters now; an unreachable router or broker gives an empty part."""

    def ca_cert(self, space) -> str:
        """The PEM of the CA that signed the space's router AMQPS certificate, or ""."""

    def connections(self, space, links: bool = False) -> list[Connection]:
        """The space's client connections now (with `links`, each with its links; without,
        their counts only); raises core.errors.Unavailable when the router or broker does not
        answer."""

    def close_connection(self, space, connection_id: str) -> Connection | None:
        """Closes one of the space's client connections (its peer sees a forced close); the
        connection as it was, or None if the space has no such connection."""

    def connectors(self, space) -> list[dict]:
        """status.connectors of a space with spec.connectors: [{name, isReady, messages}], as
        its routers tell them now."""


class _Unregistered:
    def address_counters(self, space) -> AddressCounters:
        logger.warning("readings.unregistered", extra={"space": str(space.uid)})
        return AddressCounters()

    def ca_cert(self, space) -> str:
        return ""

    def connections(self, space, links: bool = False) -> list[Connection]:
        return []

    def close_connection(self, space, connection_id: str) -> Connection | None:
        return None

    def connectors(self, space) -> list[dict]:
        return []


_registered: DataPlane = _Unregistered()


def register(dataplane: DataPlane) -> None:
    global _registered
    _registered = dataplane


def get() -> DataPlane:
    return _registered
