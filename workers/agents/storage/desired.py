"""The desired broker state of one address space, as plain data (no Django).

The storage controller builds a VhostState from the projections and hands it to
`rabbitmq.BrokerReconciler`, which makes one RabbitMQ vhost look like it.
"""
from dataclasses import dataclass, field


@dataclass(frozen=True)
class BrokerQueue:
    """A durable queue: address types queue, subscription and deadletter."""

    name: str  # the wire address (spec.address); for a subscription "<topic>::<sub>"
    kind: str  # "queue" | "subscription" | "deadletter"
    topic: str | None = None  # subscription: the topic exchange it is bound to
    deadletter: str | None = None  # name of a deadletter queue for rejected messages
    expiry: str | None = None  # name of a deadletter queue for expired messages
    ttl_ms: int | None = None  # maximum message TTL in ms (effective value)
    max_delivery_attempts: int | None = None
    max_length_bytes: int | None = None
    max_consumers: int | None = None  # subscription: 1 means a single active consumer


@dataclass(frozen=True)
class BrokerTopic:
    """A topic: an exchange of type topic; AMQP 1.0 senders use /exchange/<name>/<key>."""

    name: str
    deadletter: str | None = None
    expiry: str | None = None
    ttl_ms: int | None = None


@dataclass(frozen=True)
class BrokerUser:
    """A messaging user; patterns use EnMasse's trailing-'*' wildcard."""

    username: str  # the broker username (unique per vhost owner, see workers.naming.broker_username)
    password_hash: str  # rabbit_password_hashing_sha256: base64(salt4 + sha256(salt4 + pw))
    send: tuple[str, ...] = ()
    recv: tuple[str, ...] = ()
    manage: bool = False
    view: bool = False
    router: bool = False  # the router's own login: may read the topics' `$maas.all.` fanouts
    # RabbitMQ's user limits: connections and channels over all of the user's connections
    # (None: no limit, as for the router's own login).
    max_connections: int | None = None
    max_channels: int | None = None


@dataclass
class VhostState:
    vhost: str
    queues: list[BrokerQueue] = field(default_factory=list)
    topics: list[BrokerTopic] = field(default_factory=list)
    users: list[BrokerUser] = field(default_factory=list)
    max_connections: int | None = None
    # Bytes each MQTT session queue (`mqtt-subscription-*`, made by RabbitMQ's MQTT plugin for
    # a subscriber, outside any address) may hold; the oldest messages go first past it.
    mqtt_queue_max_bytes: int | None = None
    throttled: bool = False  # the tenant is over quota: its users may not publish
    # Clients publish to the vhost themselves (a brokered space): each queue gets an exchange
    # of its own name, the one way RabbitMQ can check a per-queue send right (rabbitmq_objects).
    queue_exchanges: bool = True
    # The broker is a cluster (MAAS_RABBITMQ_CLUSTER): every queue a quorum queue, replicated
    # on its nodes, so that one node lost loses no acknowledged message.
    replicated: bool = False
