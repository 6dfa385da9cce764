"""The RabbitMQ objects a `desired.VhostState` asks for: names, permission patterns, queue
arguments, policies, dead-letter routes, and `desired_objects` that gathers them (pure, no I/O).

How addresses map to RabbitMQ objects (see docs/storage.md):

- queue, deadletter, subscription: a durable queue named as the address (clients use
  `/amq/queue/<name>`): a *classic* queue, or a *quorum* queue when the address has a
  delivery limit (maximum delivery attempts), which only quorum queues enforce. Classic
  queues cost far less (a quorum queue is a Raft log: thousands of them swamp a node).
  Queue arguments carry only what can never change (queue type, owner marker,
  single-active-consumer); TTL, dead-lettering, delivery limit and max length come from a
  policy, because policies can change on a live queue and arguments cannot. Queues with the
  same settings share one policy whose pattern names each of them (`queue_policies`): RabbitMQ
  3.10 re-matches every queue and exchange of the broker under a lock at each policy change,
  so a policy per queue made filling a space cost its queues times the broker's size. The
  type of a live queue never changes: a classic queue whose address later needs a delivery
  limit keeps its messages and reports an address error; a quorum queue whose address no
  longer needs one simply stays quorum (it serves a classic address just as well).
- topic: a `topic` exchange named as the address; a subscription `<topic>::<sub>` is
  bound to it with key `#`. Each topic also has a `fanout` exchange
  `$maas.all.<topic>`, bound exchange-to-exchange from the topic with key `#`: a receiver of
  `/exchange/$maas.all.<topic>` gets every message of the topic. qdrouterd's link routes can
  only prefix an address, so that is where the router sends receivers of the bare topic
  (`/exchange/<topic>` alone binds with key "" and gets nothing). Only the router's broker
  login may read it.
- dead-lettering: every queue that has a deadletter or expiry target dead-letters into one
  internal headers exchange per vhost (`$maas.dlx`); bindings on `x-first-death-queue` and
  `x-first-death-reason` (match `all-with-x`) send rejected and over-delivered messages to
  the deadletter queue and expired ones to the expiry queue.
- durability: queues are durable, and so is `$maas.dlx` (a message dead-lettered while it was
  missing would be dropped). Every other exchange of MaaS is *transient*: RabbitMQ 3.10 starts
  a vhost with one Mnesia transaction per durable exchange of the whole broker, so durable
  exchanges made each new space cost the size of the broker (docs/scale.md). A broker restart
  drops them and their bindings, never a queue or a message; the broker watch
  (workers/agents/storage/watch.py) notices the restart and the storage controller makes them
  again. Meanwhile a send to a topic or to `/exchange/<queue>` is refused (`not-found`), not lost.

Ownership: the vhost carries the tag `maas-owned`; queues, exchanges and MaaS's topic
bindings (to subscription queues, to the fanout exchanges, and from `amq.topic` for MQTT) carry the argument `x-maas-owned: true`; policies and internal objects have names
starting with `$maas.`; users carry the tag `maas-owned` and are named `<user>@<vhost>`.
Everything else in a vhost is left alone.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

from workers.agents.storage.desired import BrokerQueue, BrokerTopic, BrokerUser, VhostState
from workers.naming import USER_SEPARATOR

OWNER_TAG = "maas-owned"
OWNER_ARG = "x-maas-owned"
INTERNAL_PREFIX = "$maas."
DLX_EXCHANGE = "$maas.dlx"
# + topic: every message of the topic, for bare-topic receivers (config_service.validation
# keeps topic names short enough for it; the router agent routes to it)
FANOUT_PREFIX = "$maas.all."
POLICY_PREFIX = "$maas.q."
POLICY_PRIORITY = 1000  # only one policy applies to a queue: ours must win over others
# A policy's pattern names its queues. RabbitMQ compiles it for each queue it matches against
# (about 0.6 us per name) and refuses one of about 32 KB (measured on Erlang/OTP 25): a
# setting shared by more queues than fit is split over several policies, by a hash of the
# queue name, each pattern about half this size.
POLICY_PATTERN_BYTES = 8_000
AMQ_DEFAULT = r"amq\.default"  # the name RabbitMQ checks for the default exchange
SEND_ALL = "*"  # the only send pattern granted the default exchange (it reaches every queue)
# The creation time (Unix ms) stamped on each queue and topic exchange (an argument) and vhost
# (a tag) MaaS creates: RabbitMQ's counters of an object start again when it is recreated, and
# usage metering needs to tell (workers/usage/broker_counters.py).
INCARNATION_ARG = "x-maas-created"
INCARNATION_TAG_PREFIX = "maas-created-"
TEMP_QUEUES = r"amq\.gen-.*"  # server-named queues of AMQP 1.0 receivers on /exchange/T/K
# RabbitMQ 3.10 gives an AMQP 1.0 receiver of /exchange/T/K a server-named queue that is neither
# exclusive nor auto-delete: it outlives the receiver and collects the topic's messages for
# ever. A policy expires every such queue once it has had no consumer for this long.
TEMP_QUEUE_POLICY = POLICY_PREFIX + "amq.gen"  # no address can be named amq.* (RabbitMQ's)
TEMP_QUEUE_EXPIRY_MS = 5_000
MQTT_QUEUE_POLICY = POLICY_PREFIX + "mqtt"  # bounds the MQTT plugin's session queues
# RabbitMQ's MQTT plugin publishes to one exchange for the whole broker (`mqtt.exchange`) and
# keeps each subscriber's messages in a queue `mqtt-subscription-<client id>qos<0|1>`.
# A topic address's exchange: MaaS's own type where the broker has it (a missing key, i.e. an
# AMQP message without a subject, routes as "" instead of failing the link; MQTT subtopics
# route as the subtopic), else RabbitMQ's topic (deploy/rabbitmq/rabbitmq_maas_topic).
TOPIC_TYPE = "x-maas-topic"
FALLBACK_TOPIC_TYPE = "topic"
TOPIC_TYPES = (TOPIC_TYPE, FALLBACK_TOPIC_TYPE)
TRANSIENT = False  # MaaS's exchanges but `$maas.dlx` (see the module docstring: durability)
MQTT_EXCHANGE = "amq.topic"
MQTT_EXCHANGE_REGEX = r"amq\.topic"
MQTT_QUEUES = r"mqtt-subscription-.*"

# Why a message was dead-lettered (x-first-death-reason) -> which target handles it.
REJECT_REASONS = ("rejected", "delivery_limit")
EXPIRY_REASONS = ("expired",)


# --- names and permission patterns -----------------------------------------------------


def pattern_regex(pattern: str) -> str:
    """An EnMasse address pattern (exact, or trailing '*' = any suffix) as a regex body."""
    if pattern.endswith("*"):
        return re.escape(pattern[:-1]) + ".*"
    return re.escape(pattern)


def pattern_matches(pattern: str, name: str) -> bool:
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    return name == pattern


def fanout_exchange(topic: str) -> str:
    """The fanout exchange that gets a copy of every message published to the topic."""
    return FANOUT_PREFIX + topic


def _permission_regex(bodies: list[str], internal: list[str] | None = None) -> str:
    """Anchor alternatives; '' grants nothing. Internal `$maas.` objects are never granted by
    `bodies`, only by `internal` (regex bodies starting with the escaped prefix)."""
    alternatives = []
    if bodies:
        alternatives.append(
            "^(?!" + re.escape(INTERNAL_PREFIX) + ")(" + "|".join(sorted(set(bodies))) + ")$"
        )
    if internal:
        alternatives.append("^(" + "|".join(sorted(set(internal))) + ")$")
    return "|".join(alternatives)


def user_permissions(user: BrokerUser, queues: list[str], topics: list[str],
                     throttled: bool = False) -> dict[str, str]:
    """RabbitMQ configure/write/read regexes for a user's EnMasse send/recv/manage rights.

    `throttled` (the tenant is over quota): write on no exchange, so the user publishes
    nothing; it keeps write on its temporary queues, which binding them (receiving from a
    topic) needs. The router's own login is never throttled here (the router enforces it).

    RabbitMQ checks write on the *exchange* a message is published to. AMQP 1.0 sends to
    `/amq/queue/Q` go through the default exchange, which reaches every queue of the vhost, so
    only a user that may send to every address (a send pattern `*`, the router's login
    included) gets `amq.default`. Any other send right to a queue is write on the queue's own
    exchange (`/exchange/Q`, a fanout to the queue; brokered spaces), as to a topic's.

    The router's own login (`user.router`) may also read the fanout exchange
    `$maas.all.<topic>` of each topic its recv patterns match: that is where it routes a
    receiver of the bare topic. No tenant's user is ever granted a `$maas.` object.
    """
    send_exchanges = [p for p in user.send
                      if any(pattern_matches(p, x) for x in (*topics, *queues))]
    recv_topic = any(pattern_matches(p, t) for p in user.recv for t in topics)
    temp = [TEMP_QUEUES] if recv_topic else []  # receiving from a topic declares a temp queue
    # MQTT (least privilege): a subscriber's queue, bound to amq.topic; a publisher writes to
    # amq.topic. Which routing keys is up to the topic permission (`mqtt_topic_permissions`).
    mqtt_queues = [MQTT_QUEUES] if mqtt_topics(user.recv, topics) else []
    mqtt_write = [MQTT_EXCHANGE_REGEX] if mqtt_topics(user.send, topics) else []
    mqtt_read = [MQTT_EXCHANGE_REGEX] if mqtt_queues else []
    write = ([AMQ_DEFAULT] if SEND_ALL in user.send else [])
    write += [pattern_regex(p) for p in send_exchanges]
    write += mqtt_write
    if throttled and not user.router:
        write = []
    temp += mqtt_queues
    read = [pattern_regex(p) for p in user.recv] + mqtt_read
    configure: list[str] = []
    if user.manage:
        patterns = list(user.send) + list(user.recv)
        configure = [pattern_regex(p) for p in patterns] if patterns else [".*"]
    fanouts = []
    if user.router:
        fanouts = [re.escape(FANOUT_PREFIX) + pattern_regex(p) for p in user.recv
                   if any(pattern_matches(p, t) for t in topics)]
    return {
        "configure": _permission_regex(configure + temp),
        "write": _permission_regex(write + temp),
        "read": _permission_regex(read + temp, fanouts),
    }


def mqtt_topics(patterns, topics: list[str]) -> list[str]:
    """The topic addresses the patterns match that MQTT can name: a topic address is an MQTT
    topic's first level, so a name with `/` cannot be one, and RabbitMQ turns `/` into `.`
    (the routing-key separator) and `.` into nothing else, so a name with `.` would collide
    with another topic's subtopic: such topics get no MQTT rights."""
    return sorted(t for t in topics if "." not in t and "/" not in t
                  and any(pattern_matches(p, t) for p in patterns))


def _routing_keys(topics: list[str]) -> str:
    """Routing keys of the topics and their subtopics (MQTT `t` and `t/...` become `t` and
    `t....`); '^$' (an empty key, which no MQTT topic has) when there are none."""
    if not topics:
        return "^$"
    return "^(" + "|".join(re.escape(t) for t in topics) + r")(\..*)?$"


def mqtt_topic_permissions(user: BrokerUser, topics: list[str],
                           throttled: bool = False) -> dict[str, str]:
    """The topic permission on amq.topic (RabbitMQ checks it on each MQTT publish, will
    included, and on each subscription's binding): publish to the topics the user may send
    to, subscribe to those it may receive from, each with every subtopic."""
    send = [] if throttled and not user.router else mqtt_topics(user.send, topics)
    return {"exchange": MQTT_EXCHANGE, "write": _routing_keys(send),
            "read": _routing_keys(mqtt_topics(user.recv, topics))}


# --- desired objects -------------------------------------------------------------------


@dataclass(frozen=True)
class Binding:
    """An exchange-to-queue (or exchange-to-exchange) binding, comparable by value."""

    source: str
    destination: str
    routing_key: str
    arguments: str  # canonical JSON, so bindings compare by value
    destination_type: str = "queue"  # or "exchange"

    @classmethod
    def of(cls, source: str, destination: str, routing_key: str, arguments: dict,
           destination_type: str = "queue") -> Binding:
        return cls(source, destination, routing_key, json.dumps(arguments, sort_keys=True),
                   destination_type)


@dataclass
class DesiredObjects:
    """The RabbitMQ objects of a VhostState, each tagged with the address it serves."""

    exchanges: dict[str, dict] = field(default_factory=dict)  # name -> put_exchange kwargs
    queues: dict[str, dict] = field(default_factory=dict)  # name -> arguments
    policies: dict[str, dict] = field(default_factory=dict)  # name -> put_policy kwargs
    bindings: dict[Binding, str] = field(default_factory=dict)  # -> address
    users: dict[str, BrokerUser] = field(default_factory=dict)
    permissions: dict[str, dict] = field(default_factory=dict)  # user -> regexes
    topic_permissions: dict[str, dict] = field(default_factory=dict)  # user -> amq.topic's
    owner: dict[str, str] = field(default_factory=dict)  # "queue:x" etc. -> address
    policy_queues: dict[str, list[str]] = field(default_factory=dict)  # policy -> its queues
    throttled: set[str] = field(default_factory=set)  # users whose write the throttle took
    errors: dict[str, str] = field(default_factory=dict)  # address -> problem in the state
    user_errors: dict[str, str] = field(default_factory=dict)


def queue_type(queue: BrokerQueue, replicated: bool = False) -> str:
    """quorum where needed: RabbitMQ enforces a delivery limit on quorum queues only, and only
    they are replicated over a cluster's nodes (`replicated`)."""
    return "quorum" if replicated or queue.max_delivery_attempts is not None else "classic"


def queue_arguments(queue: BrokerQueue, replicated: bool = False) -> dict:
    """Only what never changes: a different value later would fail (406) on redeclare."""
    args = {"x-queue-type": queue_type(queue, replicated), OWNER_ARG: True}
    if queue.kind == "subscription" and queue.max_consumers == 1:
        args["x-single-active-consumer"] = True
    return args


def queue_policies(settings: dict[str, dict]) -> dict[str, tuple[dict, list[str]]]:
    """{policy name: (definition, its queues)} for {queue: its policy definition}: one policy
    per distinct definition, named by a digest of it (so a queue whose settings change moves
    to another policy, and its queue is untouched); split by a hash of the queue names when
    their pattern would pass POLICY_PATTERN_BYTES."""
    groups: dict[str, list[str]] = {}
    for queue, definition in settings.items():
        groups.setdefault(json.dumps(definition, sort_keys=True), []).append(queue)
    policies = {}
    for key, queues in groups.items():
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        size = sum(len(re.escape(q)) + 1 for q in queues)
        parts = 1
        while size / parts > POLICY_PATTERN_BYTES / 2:
            parts *= 2
        for i in range(parts):
            members = sorted(q for q in queues if parts == 1 or _bucket(q, parts) == i)
            if members:
                name = POLICY_PREFIX + digest + (f".{i}-of-{parts}" if parts > 1 else "")
                policies[name] = (json.loads(key), members)
    return policies


def _bucket(queue: str, parts: int) -> int:
    return int(hashlib.sha256(queue.encode()).hexdigest()[:8], 16) % parts


def names_pattern(queues: list[str]) -> str:
    """A regex that matches exactly these queue names."""
    return "^(?:" + "|".join(re.escape(q) for q in queues) + ")$"


def policy_of(desired: DesiredObjects, queue: str) -> str | None:
    """The name of the policy that carries the queue's settings (None: it needs none)."""
    return next((name for name, queues in desired.policy_queues.items() if queue in queues),
                None)


def policy_definition(queue: BrokerQueue, topic: BrokerTopic | None = None) -> dict:
    """The live-changeable settings of a queue; a subscription inherits unset ones from
    its topic (an exchange holds no messages, so TTL and dead-lettering live on queues)."""
    ttl, deadletter, expiry = queue.ttl_ms, queue.deadletter, queue.expiry
    if topic is not None:
        ttl = topic.ttl_ms if ttl is None else ttl
        deadletter = deadletter or topic.deadletter
        expiry = expiry or topic.expiry
    definition: dict = {}
    if ttl is not None:
        definition["message-ttl"] = ttl
    if deadletter or expiry:
        definition["dead-letter-exchange"] = DLX_EXCHANGE
    if queue.max_delivery_attempts is not None:
        # quorum queues dead-letter once a message was returned more than delivery-limit
        # times: N attempts in total = limit N - 1 (measured on 3.10).
        definition["delivery-limit"] = max(0, queue.max_delivery_attempts - 1)
    if queue.max_length_bytes is not None:
        definition["max-length-bytes"] = queue.max_length_bytes
        definition["overflow"] = "reject-publish"  # refuse senders instead of dropping old
    return definition


def dead_letter_routes(
    queue: BrokerQueue, topic: BrokerTopic | None = None
) -> list[tuple[str, str]]:
    """(reason, target queue) pairs for the queue's dead-lettered messages."""
    deadletter, expiry = queue.deadletter, queue.expiry
    if topic is not None:
        deadletter = deadletter or topic.deadletter
        expiry = expiry or topic.expiry
    routes = [(r, deadletter) for r in REJECT_REASONS if deadletter]
    routes += [(r, expiry) for r in EXPIRY_REASONS if expiry]
    return routes


def _dlx_binding(source_queue: str, reason: str, target: str) -> Binding:
    args = {
        "x-match": "all-with-x",  # plain "all" ignores x- headers
        "x-first-death-queue": source_queue,
        "x-first-death-reason": reason,
    }
    return Binding.of(DLX_EXCHANGE, target, "", args)


def desired_objects(state: VhostState, topic_type: str = TOPIC_TYPE) -> DesiredObjects:
    """What the vhost should hold; `topic_type` is the exchange type of topic addresses."""
    d = DesiredObjects()
    topics = {t.name: t for t in state.topics}
    queue_names = {q.name for q in state.queues}
    settings: dict[str, dict] = {}  # queue -> its policy definition
    d.exchanges[DLX_EXCHANGE] = {"type": "headers", "internal": True, "durable": True}
    for topic in state.topics:
        d.exchanges[topic.name] = {"type": topic_type, "internal": False,
                                   "durable": TRANSIENT}
        d.owner["exchange:" + topic.name] = topic.name
        # Not internal: AMQP 1.0 receivers bind their temporary queues to it.
        fanout = fanout_exchange(topic.name)
        d.exchanges[fanout] = {"type": "fanout", "internal": False, "durable": TRANSIENT}
        d.owner["exchange:" + fanout] = topic.name
        d.bindings[Binding.of(topic.name, fanout, "#", {OWNER_ARG: True}, "exchange")] = (
            topic.name
        )
        if mqtt_topics([topic.name], [topic.name]):
            # MQTT publishes to the topic (`T`) or its subtopics (`T/...`, key `T....`) reach
            # the topic's exchange, its subscriptions and its whole-topic receivers. RabbitMQ
            # cannot rewrite routing keys, so there is no way back (see docs/storage.md).
            for key in (topic.name, topic.name + ".#"):
                d.bindings[Binding.of(MQTT_EXCHANGE, topic.name, key, {OWNER_ARG: True},
                                      "exchange")] = topic.name
    if state.topics:
        d.policies[TEMP_QUEUE_POLICY] = {
            "pattern": "^" + TEMP_QUEUES, "definition": {"expires": TEMP_QUEUE_EXPIRY_MS},
            "priority": POLICY_PRIORITY, "apply-to": "queues",
        }
        # its problems show on the first topic: they are the topics' receivers' queues
        d.owner["policy:" + TEMP_QUEUE_POLICY] = min(topics)
        if state.mqtt_queue_max_bytes and mqtt_topics(list(topics), list(topics)):
            # A subscriber's session queue lives outside the space's addresses: bounded, the
            # oldest messages dropped first (a device away for long gets the latest).
            d.policies[MQTT_QUEUE_POLICY] = {
                "pattern": "^" + MQTT_QUEUES, "priority": POLICY_PRIORITY, "apply-to": "queues",
                "definition": {"max-length-bytes": state.mqtt_queue_max_bytes,
                               "overflow": "drop-head"}}
            d.owner["policy:" + MQTT_QUEUE_POLICY] = min(topics)
    for queue in state.queues:
        topic = topics.get(queue.topic) if queue.kind == "subscription" else None
        d.queues[queue.name] = queue_arguments(queue, state.replicated)
        d.owner["queue:" + queue.name] = queue.name
        if state.queue_exchanges and queue.kind in ("queue", "deadletter"):
            # `/exchange/<queue>`: write on it is the user's right to send to this queue only
            d.exchanges[queue.name] = {"type": "fanout", "internal": False,
                                       "durable": TRANSIENT}
            d.owner["exchange:" + queue.name] = queue.name
            d.bindings[Binding.of(queue.name, queue.name, "", {OWNER_ARG: True})] = queue.name
        if queue.kind == "subscription":
            if topic is None:
                d.errors[queue.name] = f"topic {queue.topic!r} is not in this address space"
            else:
                d.bindings[Binding.of(topic.name, queue.name, "#", {OWNER_ARG: True})] = (
                    queue.name
                )
        definition = policy_definition(queue, topic)
        if definition:
            settings[queue.name] = definition
        for reason, target in dead_letter_routes(queue, topic):
            if target not in queue_names:
                d.errors[queue.name] = f"dead-letter target {target!r} is not a queue here"
                continue
            d.bindings[_dlx_binding(queue.name, reason, target)] = queue.name
    for name, (definition, members) in queue_policies(settings).items():
        d.policies[name] = {"pattern": names_pattern(members), "definition": definition,
                            "priority": POLICY_PRIORITY, "apply-to": "queues"}
        d.owner["policy:" + name] = members[0]
        d.policy_queues[name] = members
    suffix = USER_SEPARATOR + state.vhost
    for user in state.users:
        if not user.username.endswith(suffix) or ":" in user.username:
            d.user_errors[user.username] = "username must be broker_username(vhost, user)"
            continue
        d.users[user.username] = user
        d.permissions[user.username] = user_permissions(
            user, sorted(queue_names), sorted(topics), state.throttled
        )
        d.topic_permissions[user.username] = mqtt_topic_permissions(
            user, sorted(topics), state.throttled
        )
        if state.throttled and not user.router:
            d.throttled.add(user.username)
    return d
