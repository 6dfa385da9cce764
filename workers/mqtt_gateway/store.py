"""What the gateway reads and writes in the control plane's database: a space's address names
and types (the mapping needs them; cached a few seconds), retained messages and persistent
sessions (their durable subscription addresses go through the service functions). Every call
runs in a worker thread (`asyncio.to_thread`): Django's ORM is synchronous."""

import asyncio
import hashlib
import time

from django.conf import settings
from django.db import close_old_connections

from config_service import services
from config_service.models import Address, AddressSpace
from maas.core.context import Context
from workers.models import MqttSession, RetainedMessage

from .mapping import matches

ADDRESS_TTL = 5.0  # seconds a space's address list is reused


def _addresses(vhost: str) -> dict:
    close_old_connections()
    slug, _, name = vhost.partition(".")
    rows = Address.objects.filter(space__tenant__slug=slug, space__name=name,
                                  space__terminating=False, space__type="standard")
    return dict(rows.values_list("address", "type"))


def router_of(vhost: str, default: tuple[str, int]) -> tuple[str, int]:
    """Where the space's router takes AMQP clients: on Kubernetes the Service of the space's
    own router (workers/infra), otherwise the one router of the machine (`default`)."""
    if settings.MAAS_INFRA_BACKEND != "kubernetes":
        return default
    from workers.infra import manifests as m
    from workers.infra.backend import infra_settings

    close_old_connections()
    slug, _, name = vhost.partition(".")
    uid = AddressSpace.objects.filter(tenant__slug=slug, name=name, type="standard").values_list(
        "uid", flat=True).first()
    if uid is None:
        return default  # no such space: the router refuses the login anyway
    return m.service_host(m.router_name(m.infra_id(str(uid))), infra_settings()), \
        m.ROUTER_AMQP_PORT


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


def _space(vhost: str) -> AddressSpace | None:
    slug, _, name = vhost.partition(".")
    return AddressSpace.objects.filter(tenant__slug=slug, name=name, type="standard",
                                       terminating=False).first()


def save_retained(vhost: str, topic: str, payload: bytes, qos: int) -> None:
    """The topic's retained message; an empty payload removes it (3.1.1 section 3.3.1.3)."""
    close_old_connections()
    space = _space(vhost)
    if space is None:
        return
    if not payload:
        RetainedMessage.objects.filter(space_uid=space.uid, topic=topic).delete()
        return
    RetainedMessage.objects.update_or_create(space_uid=space.uid, topic=topic,
                                             defaults={"payload": payload, "qos": qos})


def load_retained(vhost: str, topic_filter: str) -> list[RetainedMessage]:
    close_old_connections()
    space = _space(vhost)
    if space is None:
        return []
    # by the uid: a space deleted and made again under its name does not see the old ones
    rows = RetainedMessage.objects.filter(space_uid=space.uid)
    head = topic_filter.split("/", 1)[0]
    if head not in ("+", "#"):
        rows = rows.filter(topic__startswith=head)
    rows = [r for r in rows.order_by("topic") if matches(topic_filter, r.topic)]
    for r in rows:
        r.payload = bytes(r.payload)
    return rows


# -- persistent sessions (clean session 0) -----------------------------------------------------
def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()[:12]


def durable_name(client_id: str, topic_filter: str, topic: str) -> str:
    """The subscription address that keeps a session's QoS 1 messages of one topic address."""
    return f"mqtt-{_digest(client_id)}-{_digest(topic_filter, topic)}"


def load_session(vhost: str, client_id: str) -> dict | None:
    close_old_connections()
    space = _space(vhost)
    if space is None:
        return None
    row = MqttSession.objects.filter(space_uid=space.uid, client_id=client_id).first()
    return None if row is None else dict(row.subscriptions)


def save_session(vhost: str, client_id: str, subscriptions: dict) -> None:
    close_old_connections()
    space = _space(vhost)
    if space is not None:
        MqttSession.objects.update_or_create(space_uid=space.uid, client_id=client_id,
                                             defaults={"subscriptions": subscriptions})


def ensure_subscription(vhost: str, topic: str, name: str, actor: str) -> None:
    """The durable subscription address `name` on `topic`, made through the service function
    (a config event; the agents give it its broker queue) if the space does not have it."""
    close_old_connections()
    space = _space(vhost)
    if space is None or Address.objects.filter(space=space, address=name).exists():
        return
    services.create_address(ctx=Context(actor=actor), space=space, address=name,
                            type="subscription", plan=settings.MAAS_MQTT_SESSION_PLAN,
                            topic=topic)


def drop_subscriptions(vhost: str, client_id: str, actor: str, names=None) -> None:
    """Delete the named durable subscriptions of a client (all of them without `names`), and
    with all of them its session."""
    close_old_connections()
    space = _space(vhost)
    if space is None:
        return
    if names is None:
        MqttSession.objects.filter(space_uid=space.uid, client_id=client_id).delete()
    rows = Address.objects.filter(space=space, type="subscription",
                                  address__startswith=f"mqtt-{_digest(client_id)}-")
    if names is not None:
        rows = rows.filter(address__in=list(names))
    for name in list(rows.values_list("name", flat=True)):
        services.delete_address(ctx=Context(actor=actor), space=space, name=name)
