"""The data-plane reads the portal and the API show, behind one interface the layer above
registers: a space's live address counters (router and broker) and its router's CA certificate.

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


class DataPlane(Protocol):
    def address_counters(self, space) -> AddressCounters:
        """The space's counters now; an unreachable router or broker gives an empty part."""

    def ca_cert(self, space) -> str:
        """The PEM of the CA that signed the space's router AMQPS certificate, or ""."""


class _Unregistered:
    def address_counters(self, space) -> AddressCounters:
        logger.warning("readings.unregistered", extra={"space": str(space.uid)})
        return AddressCounters()

    def ca_cert(self, space) -> str:
        return ""


_registered: DataPlane = _Unregistered()


def register(dataplane: DataPlane) -> None:
    global _registered
    _registered = dataplane


def get() -> DataPlane:
    return _registered
