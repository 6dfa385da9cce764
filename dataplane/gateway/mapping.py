"""MQTT topics to a standard space's addresses and back (the brokered spaces' mapping,
docs/storage.md): a topic address is the topic's first level and the rest its subtopic (`/`
becomes `.`, the routing key's separator); anycast, multicast and queue addresses are named
whole. `addresses` maps a space's address names to their types."""

from dataclasses import dataclass

WHOLE = ("anycast", "multicast", "queue")


@dataclass(frozen=True)
class Source:
    """An AMQP receiver for (part of) an MQTT subscription: the address to attach to, and the
    topic address when it is one (its messages' topic is rebuilt from their routing key)."""

    address: str
    topic: str | None = None
    key: str | None = None  # the routing key when the address names one without wildcards


def publish_target(topic: str, addresses: dict) -> tuple[str, str | None] | None:
    """(AMQP address, subject) an MQTT PUBLISH goes to, or None (no such address)."""
    if addresses.get(topic) in WHOLE:
        return topic, None
    head, _, rest = topic.partition("/")
    if addresses.get(head) == "topic":
        return head, rest.replace("/", ".") or None
    return None


def matches(topic_filter: str, topic: str) -> bool:
    """MQTT 3.1.1 topic filter matching (`+` one level, `#` the rest, the parent included)."""
    f, t = topic_filter.split("/"), topic.split("/")
    for i, level in enumerate(f):
        if level == "#":
            return True
        if i >= len(t):
            return False
        if level != "+" and level != t[i]:
            return False
    return len(f) == len(t)


def _key_filter(rest: str) -> str:
    return rest.replace("/", ".").replace("+", "*")


def subscription_sources(topic_filter: str, addresses: dict) -> list[Source]:
    """The AMQP receivers that carry what an MQTT subscription wants, within the space: its
    topic address with a routing-key filter, or the anycast/multicast/queue address it names;
    a filter starting with a wildcard reaches every address it can match."""
    head, _, rest = topic_filter.partition("/")
    if head in ("+", "#"):
        heads = [name for name, kind in sorted(addresses.items())
                 if kind == "topic" or (kind in WHOLE and matches(topic_filter, name))]
    else:
        heads = [head] if addresses.get(head) == "topic" else []
        if addresses.get(topic_filter) in WHOLE:
            return [Source(topic_filter)]
    out = []
    for name in heads:
        kind = addresses[name]
        if kind in WHOLE:
            out.append(Source(name))
        elif head == "#" or rest in ("", "#"):
            # the bare topic: every message; the gateway keeps those the filter matches
            out.append(Source(name, name))
        elif head == "+" and not rest:
            out.append(Source(name, name))  # `+` alone: topic addresses' bare messages
        else:
            key = _key_filter(rest)
            fixed = None if "*" in key or "#" in key else key
            out.append(Source(f"{name}/{key}", name, fixed))
    return out


def topic_of(source: Source, routing_key: str | None) -> str:
    """The MQTT topic of a message a receiver got: the routing key is its subject (RabbitMQ
    3.10 passes on no other trace of it), or the key its receiver's address named."""
    if source.topic is None:
        return source.address
    routing_key = routing_key or source.key
    return f"{source.topic}/{routing_key.replace('.', '/')}" if routing_key else source.topic


def covers(source: Source, topic: str) -> bool:
    """Whether a receiver of `source` would get a message of this MQTT topic (a retained
    message goes only to receivers the router let attach to where it would have come from)."""
    if source.topic is None:
        return topic == source.address
    head, _, key = source.address.partition("/")
    if not key:
        return topic == head or topic.startswith(head + "/")
    return matches(f"{head}/" + key.replace(".", "/").replace("*", "+"), topic)
