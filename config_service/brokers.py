"""The broker pool: the RabbitMQs spaces are placed on, and the choice of one for a new space.

On one machine that is the broker of the settings and MAAS_RABBITMQ_NODES - 1 more nodes on the
same host (deploy/local/rabbitmq-nodes.sh, on its ports), or, with MAAS_RABBITMQ_CLUSTER, one
cluster of such nodes; on Kubernetes, the shared broker of the
brokered spaces. A space records its broker at creation (`address_space.created`'s `broker`,
`AddressSpace.broker`) and keeps it: its vhost, users and messages live there. The workers reach
it through workers.endpoints.
"""
import logging
import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.db.models import Count

from core.errors import Unavailable

from .models import AddressSpace

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BrokerEndpoint:
    """A RabbitMQ: its management API and the AMQP listener its router connects to."""

    api_url: str
    api_user: str
    api_password: str
    amqp_host: str
    amqp_port: int
    mqtt_port: int = 0  # tenants' MQTT listener (brokered spaces): the MQTT relay; 0: none known
    name: str = ""  # in the pool: what a space records (AddressSpace.broker); "" the shared one
    relay_port: int = 0  # on one machine: the vhost relay in front of it (docs/router.md)
    broker_mqtt_port: int = 0  # RabbitMQ's own MQTT listener, behind the MQTT relay
    # Tenants' AMQP (the brokered-amqp relay, plain and TLS) and MQTTS; 0: none
    tenant_amqp_port: int = 0
    tenant_amqps_port: int = 0
    mqtts_port: int = 0
    # A cluster (MAAS_RABBITMQ_CLUSTER): its other nodes' (AMQP, MQTT, AMQPS, MQTTS ports) on
    # amqp_host; `api_url` then lists every node's API, comma-separated. Its queues are quorum
    # queues and its clients (relays, the management API's) go to another node when one is gone.
    more_nodes: tuple = ()
    # RabbitMQ's own TLS listeners (AMQPS, MQTTS), signed by the internal CA; 0: none
    amqps_port: int = 0
    broker_mqtts_port: int = 0

    @property
    def broker_ca(self) -> str:
        """The CA the platform's links to this broker check its certificate against; "" when
        they are plain (no TLS listener, or no internal CA on this machine)."""
        return internal_ca() if self.amqps_port else ""

    @property
    def cluster(self) -> bool:
        """Several nodes (more_nodes on one machine, several APIs on Kubernetes): its queues
        are quorum queues, replicated on the nodes."""
        return bool(self.more_nodes) or len(self.api_urls) > 1

    @property
    def api_urls(self) -> list[str]:
        """Each node's management API (one, but for a cluster): any answers for the broker."""
        return [u.strip() for u in self.api_url.split(",") if u.strip()]


def internal_ca() -> str:
    """The internal CA's certificate (MAAS_INTERNAL_TLS_DIR/ca.pem, made by
    deploy/local/services.sh with RabbitMQ's TLS listeners); "" where there is none."""
    path = os.path.join(settings.MAAS_INTERNAL_TLS_DIR, "ca.pem")
    return path if os.path.exists(path) else ""


def shared_broker() -> BrokerEndpoint:
    """The RabbitMQ of the control plane's settings: the first of the pool."""
    return BrokerEndpoint(settings.RABBITMQ_API_URL, settings.RABBITMQ_API_USER,
                          settings.RABBITMQ_API_PASSWORD, settings.RABBITMQ_AMQP_HOST,
                          settings.RABBITMQ_AMQP_PORT, settings.MAAS_MQTT_RELAY_PORT, "",
                          settings.MAAS_VHOST_RELAY_PORT, settings.RABBITMQ_MQTT_PORT,
                          settings.MAAS_BROKERED_AMQP_PORT, settings.MAAS_BROKERED_AMQPS_PORT,
                          settings.MAAS_MQTT_RELAY_TLS_PORT,
                          amqps_port=settings.RABBITMQ_AMQPS_PORT,
                          broker_mqtts_port=settings.RABBITMQ_MQTTS_PORT)


def broker_pool() -> list[BrokerEndpoint]:
    """The brokers spaces are placed on: the shared one, then node k = 1.. of
    MAAS_RABBITMQ_NODES on the same host, on deploy/local/rabbitmq-nodes.sh's ports (and the
    relays' in front of them: maas/settings.py)."""
    shared = shared_broker()
    api_host = urlsplit(shared.api_url).hostname or shared.amqp_host
    if settings.MAAS_RABBITMQ_CLUSTER:
        return [shared, _cluster(shared, api_host)]
    return [shared] + [
        BrokerEndpoint(f"http://{api_host}:{15680 + k}/api", shared.api_user,
                       shared.api_password, shared.amqp_host, 5680 + k, 1900 + k, f"maas{k}",
                       5690 + k, 1890 + k, 5700 + k if shared.tenant_amqp_port else 0,
                       5710 + k if shared.tenant_amqps_port else 0,
                       1910 + k if shared.mqtts_port else 0,
                       amqps_port=5660 + k if shared.amqps_port else 0,
                       broker_mqtts_port=8870 + k if shared.broker_mqtts_port else 0)
        for k in range(1, settings.MAAS_RABBITMQ_NODES)]


def _cluster(shared: BrokerEndpoint, api_host: str) -> BrokerEndpoint:
    """The clustered nodes maasA..maasB as one broker, `cluster`: reached on node A's ports
    (its relays' too), every node's API and AMQP and MQTT listeners its failover."""
    first, last = (int(k) for k in settings.MAAS_RABBITMQ_CLUSTER.split("-"))
    nodes = range(first, last + 1)
    return BrokerEndpoint(
        ",".join(f"http://{api_host}:{15680 + k}/api" for k in nodes), shared.api_user,
        shared.api_password, shared.amqp_host, 5680 + first, 1900 + first, "cluster",
        5690 + first, 1890 + first, 5700 + first if shared.tenant_amqp_port else 0,
        5710 + first if shared.tenant_amqps_port else 0, 1910 + first if shared.mqtts_port else 0,
        more_nodes=tuple((5680 + k, 1890 + k, 5660 + k, 8870 + k) for k in nodes if k != first),
        amqps_port=5660 + first if shared.amqps_port else 0,
        broker_mqtts_port=8870 + first if shared.broker_mqtts_port else 0)


def pooled_broker(name: str) -> BrokerEndpoint:
    """The broker of the pool a space recorded; a name the pool lacks (MAAS_RABBITMQ_NODES
    lowered under its spaces) is a configuration error, never another broker's vhost."""
    for broker in broker_pool():
        if broker.name == name:
            return broker
    raise ImproperlyConfigured(
        f"a space is placed on broker {name!r}, which MAAS_RABBITMQ_NODES="
        f"{settings.MAAS_RABBITMQ_NODES} does not run")


# Serialises placements (a transaction-level advisory lock), so that two creations at once
# never both take a broker's last place.
_PLACEMENT_LOCK = 0x6D616173  # "maas"


def choose_broker() -> str:
    """The broker a new space goes to: the pool's with the fewest spaces (ties: the first)
    among those holding fewer than MAAS_BROKER_MAX_SPACES; raises Unavailable when every one
    holds that many. Spaces being deleted count until they are gone (their vhosts are still
    there). Called within the creation's transaction, which keeps the lock until it ends."""
    pool = [b.name for b in broker_pool()]
    bound = settings.MAAS_BROKER_MAX_SPACES
    if len(pool) == 1 and not bound:
        return pool[0]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_PLACEMENT_LOCK])
    counts = dict(AddressSpace.objects.filter(broker__in=pool).values_list("broker")
                  .annotate(n=Count("id")).order_by())
    room = [name for name in pool if not bound or counts.get(name, 0) < bound]
    if not room:
        logger.warning("placement.full", extra={"brokers": len(pool), "bound": bound})
        raise Unavailable(
            f"No broker of this installation has room for another address space (each of its "
            f"{len(pool)} holds {bound}); nothing was created. Try again later, or ask the "
            f"operator to add a broker (MAAS_RABBITMQ_NODES) or raise MAAS_BROKER_MAX_SPACES.")
    return min(room, key=lambda name: counts.get(name, 0))
