"""What the gateway reads and writes in the control plane's database: a space's address names
and types (the mapping needs them; cached a few seconds) and retained messages. Every call
runs in a worker thread (`asyncio.to_thread`): Django's ORM is synchronous."""

import asyncio
import time

from django.db import close_old_connections

from config_service.models import Address
from workers.models import RetainedMessage

from .mapping import matches

ADDRESS_TTL = 5.0  # seconds a space's address list is reused


def _addresses(vhost: str) -> dict:
    close_old_connections()
    slug, _, name = vhost.partition(".")
    rows = Address.objects.filter(space__tenant__slug=slug, space__name=name,
                                  space__terminating=False, space__type="standard")
    return dict(rows.values_list("address", "type"))


class AddressBook:
    """The address names and types of the spaces the gateway's clients are in."""

    def __init__(self, ttl: float = ADDRESS_TTL):
        self.ttl = ttl
        self._cache: dict = {}  # vhost -> (loaded at, {address: type})

    def cached(self, vhost: str) -> dict | None:
        hit = self._cache.get(vhost)
        if hit is None or time.monotonic() - hit[0] > self.ttl:
            return None
        return hit[1]

    async def get(self, vhost: str, fresh: bool = False) -> dict:
        hit = None if fresh else self.cached(vhost)
        if hit is not None:
            return hit
        addresses = await asyncio.to_thread(_addresses, vhost)
        self._cache[vhost] = (time.monotonic(), addresses)
        return addresses


def save_retained(vhost: str, topic: str, payload: bytes, qos: int) -> None:
    """The topic's retained message; an empty payload removes it (3.1.1 section 3.3.1.3)."""
    close_old_connections()
    if not payload:
        RetainedMessage.objects.filter(vhost=vhost, topic=topic).delete()
        return
    RetainedMessage.objects.update_or_create(vhost=vhost, topic=topic,
                                             defaults={"payload": payload, "qos": qos})


def load_retained(vhost: str, topic_filter: str) -> list[RetainedMessage]:
    close_old_connections()
    rows = RetainedMessage.objects.filter(vhost=vhost)
    head = topic_filter.split("/", 1)[0]
    if head not in ("+", "#"):
        rows = rows.filter(topic__startswith=head)
    rows = [r for r in rows.order_by("topic") if matches(topic_filter, r.topic)]
    for r in rows:
        r.payload = bytes(r.payload)
    return rows
