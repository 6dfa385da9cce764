"""The gateway's cache of its spaces' address names and types (the mapping needs them on every
publish and subscribe; reread after a few seconds), and the names of persistent sessions'
durable subscriptions. What it reads and writes in the control plane goes through
`dataplane.control.GatewayStore`, in worker threads."""

import asyncio
import hashlib
import time

from ..control import GatewayStore

ADDRESS_TTL = 5.0  # seconds a space's address list is reused


class AddressBook:
    """The address names and types of the spaces the gateway's clients are in."""

    def __init__(self, control: GatewayStore, ttl: float = ADDRESS_TTL):
        self.control = control
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
        addresses = await asyncio.to_thread(self.control.addresses, vhost)
        self._cache[vhost] = (time.monotonic(), addresses)
        return addresses


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()[:12]


def durable_prefix(client_id: str) -> str:
    """The head of every durable subscription address of one client's persistent session."""
    return f"mqtt-{_digest(client_id)}-"


def durable_name(client_id: str, topic_filter: str, topic: str) -> str:
    """The subscription address that keeps a session's QoS 1 messages of one topic address."""
    return durable_prefix(client_id) + _digest(topic_filter, topic)
