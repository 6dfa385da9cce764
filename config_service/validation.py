"""Checks of names, address specs and authorization rules; each failure names its field."""
import base64
import binascii
import math
import re

from core.errors import Invalid
from core.limits import printable

NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
RESOURCE_SUFFIX = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,188}[a-z0-9])?$")
ADDRESS = re.compile(r"^[^\s]{1,200}$")
USERNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,62}[A-Za-z0-9])?$")

ADDRESS_TYPES_BY_SPACE = {
    "standard": ("anycast", "multicast", "queue", "topic", "subscription", "deadletter"),
    "brokered": ("queue", "topic", "deadletter"),
}
OPERATIONS = ("send", "recv", "view", "manage")
TTL_KEYS = ("minimum", "maximum")
REDELIVERY_KEYS = (
    "maximumDeliveryAttempts",
    "redeliveryDelay",
    "redeliveryDelayMultiplier",
    "maximumDeliveryDelay",
)
# What no broker or router here can enforce, so it is refused unless it asks for nothing (0,
# a multiplier of 1) or is what was stored before (a PATCH of another field must not fail):
# RabbitMQ 3.10 puts a released or modified message back at once (no delayed redelivery)
# and keeps the TTL a sender sets (it cannot raise one), and the routers store nothing.
NOT_ENFORCED = {
    "redeliveryDelay": "a redelivery delay cannot be enforced: RabbitMQ 3.10 redelivers a "
                       "released message at once and the routers store nothing",
    "maximumDeliveryDelay": "a redelivery delay cannot be enforced: RabbitMQ 3.10 redelivers "
                            "a released message at once and the routers store nothing",
    "redeliveryDelayMultiplier": "a redelivery delay cannot be enforced: RabbitMQ 3.10 "
                                 "redelivers a released message at once",
    "minimum": "a minimum TTL cannot be enforced: the brokers keep the TTL a sender sets",
}
NOTHING_ASKED = {"redeliveryDelayMultiplier": (0, 1)}
# The keys of an AddressSpace's spec that MaaS implements (endpoints: space_endpoints.py,
# connectors: space_connectors.py); EnMasse's others (authenticationService, networkPolicy)
# have no effect here, and routerPolicy is the operator's (plans and settings), so none of them
# is accepted, let alone stored.
SPACE_SPEC_KEYS = ("type", "plan", "endpoints", "connectors")

# RabbitMQ: a queue or exchange name is at most 255 bytes, and `amq.` is reserved
# (403 ACCESS_REFUSED). `.` and `..` cannot be named in the management API's URLs.
MAX_WIRE_NAME_BYTES = 255
RESERVED_ADDRESSES = (".", "..")
# `$`: EnMasse's and the routers' (`$management`; `$maas.`, storage internals); `amq.`:
# RabbitMQ's; `_`: qdrouterd's own address classes (`_local/`, `_topo/`, `_edge/`, `_$qd`).
RESERVED_ADDRESS_PREFIXES = ("$", "_", "amq.")
# qdrouterd routes an address after dropping a `scheme:/` head, so `a:/b` would not reach
# the address it names (and `x:/_local/...` would reach the router's own).
ROUTED_AS_ANOTHER = ":/"
# C1 controls too: an address is a wire name shown in consoles, never invisible.
ADDRESS_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

# Numbers end up in RabbitMQ policies and queue arguments (message-ttl is an unsigned 32-bit
# count of milliseconds, delivery-limit a signed 32-bit integer); beyond these the broker
# refuses the policy and the address never becomes Active.
MAX_MILLISECONDS = 2**32 - 1
MAX_DELIVERY_ATTEMPTS = 2**31 - 1
MAX_DELAY_MULTIPLIER = 100
MAX_CONSUMERS = 10_000


def space_name(value) -> str:
    if not isinstance(value, str) or not NAME.match(value):
        raise Invalid(
            "Use 1 to 63 lower-case letters, digits and '-', starting and ending with a "
            "letter or digit.",
            "metadata.name",
        )
    return value


def resource_name(value, space: str, kind: str, derived_from: str) -> str:
    """metadata.name of an Address or MessagingUser: `<space>.<suffix>` (EnMasse's rule)."""
    if value in (None, ""):
        suffix = re.sub(r"[^a-z0-9.-]+", "-", derived_from.lower()).strip("-.") or "x"
        return f"{space}.{suffix[:180]}"
    if not isinstance(value, str) or not value.startswith(f"{space}."):
        raise Invalid(f"{kind} name must be on the form {space}.<name>", "metadata.name")
    if not RESOURCE_SUFFIX.match(value[len(space) + 1:]):
        raise Invalid(
            "After '<space>.', use lower-case letters, digits, '-' and '.'", "metadata.name"
        )
    return value


def address(value) -> str:
    field = "spec.address"
    if not isinstance(value, str) or not ADDRESS.match(value) or ADDRESS_CONTROL.search(value):
        raise Invalid("spec.address is required: 1 to 200 characters, no spaces or control "
                      "characters", field)
    if not value.isascii():
        # RabbitMQ 3.10 fails on a link address outside ASCII (`re:split badarg`) and ends the
        # whole session, with every other address of the space on it; a look-alike letter
        # (Cyrillic `а`, a full-width digit) or an invisible one (U+202E) is also a trap.
        raise Invalid("spec.address must be printable ASCII: letters, digits and "
                      "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ (no accented, non-Latin or invisible "
                      "characters)", field)
    if value in RESERVED_ADDRESSES or value.startswith(RESERVED_ADDRESS_PREFIXES):
        raise Invalid(f"spec.address must not be . or .. nor start with "
                      f"{', '.join(RESERVED_ADDRESS_PREFIXES)} (reserved by the broker or the "
                      "router)", field)
    if "::" in value:
        raise Invalid("spec.address must not contain '::'", field)
    if ROUTED_AS_ANOTHER in value:
        raise Invalid("spec.address must not contain ':/' (a router reads what precedes it as "
                      "a URL scheme)", field)
    return value


STORED_TYPES = ("queue", "topic", "subscription", "deadletter")
ESCAPED_SLASH = "%2F"  # what RabbitMQ's AMQP 1.0 addresses decode to `/` (wire.amqp_queue)


def stored_address(value: str, address_type: str, space_type: str) -> None:
    """What RabbitMQ cannot carry in the name of a queue, topic, subscription or deadletter."""
    if address_type not in STORED_TYPES:
        return
    if ESCAPED_SLASH in value:
        raise Invalid(f"spec.address of a {address_type} must not contain '{ESCAPED_SLASH}' "
                      "(RabbitMQ reads it as '/', another queue)", "spec.address")
    if address_type == "topic" and space_type == "standard" and "/" in value:
        # The router routes `<topic>/<key>` to the exchange `<topic>` with routing key `<key>`:
        # a `/` in the topic's own name would split it there.
        raise Invalid("spec.address of a topic in a standard space must not contain '/' "
                      "(the router reads what follows it as the routing key)", "spec.address")


def subscription_queue(address_: str, topic) -> None:
    """A subscription's broker queue is `<topic>::<address>`: it must fit RabbitMQ's limit."""
    if isinstance(topic, str) and len(f"{topic}::{address_}".encode()) > MAX_WIRE_NAME_BYTES:
        raise Invalid(f"<topic>::<address> (the subscription's queue) must be at most "
                      f"{MAX_WIRE_NAME_BYTES} characters", "spec.address")


# The storage controller's fanout exchange of a topic (workers.agents.storage.rabbitmq_objects):
# `$maas.all.` + at most 200 ASCII characters fits RabbitMQ's 255 bytes.
TOPIC_FANOUT_PREFIX = "$maas.all."


def address_type(value, space_type: str) -> str:
    allowed = ADDRESS_TYPES_BY_SPACE[space_type]
    if value not in allowed:
        raise Invalid(
            f"spec.type must be one of {', '.join(allowed)} in a {space_type} address space",
            "spec.type",
        )
    return value


def _int_in(value, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise Invalid(f"must be an integer from {low} to {high}", field)
    return value


def _refuse_not_enforced(given: dict, kept: dict | None, section: str) -> None:
    """Refuses a value of NOT_ENFORCED that asks for something and was not stored before."""
    for key, why in NOT_ENFORCED.items():
        value = given.get(key)
        if value in (None, *NOTHING_ASKED.get(key, (0,))) or value == (kept or {}).get(key):
            continue
        kept_hint = "maximumDeliveryAttempts is" if section == "messageRedelivery" else \
            "maximum is"
        raise Invalid(f"{why}; leave {key} out ({kept_hint} enforced)", f"spec.{section}.{key}")


def message_ttl(value, kept: dict | None = None) -> dict:
    """A messageTtl; `kept`: the one stored before (its minimum stays allowed)."""
    if value in (None, {}):
        return {}
    if not isinstance(value, dict) or set(value) - set(TTL_KEYS):
        raise Invalid("messageTtl takes minimum and maximum (milliseconds)", "spec.messageTtl")
    ttl = {k: _int_in(v, f"spec.messageTtl.{k}", 0, MAX_MILLISECONDS) for k, v in value.items()}
    if ttl.get("minimum") and ttl.get("maximum") and ttl["minimum"] > ttl["maximum"]:
        raise Invalid("minimum must not exceed maximum", "spec.messageTtl")
    _refuse_not_enforced(ttl, kept, "messageTtl")
    return ttl


def message_redelivery(value, kept: dict | None = None) -> dict:
    """A messageRedelivery; `kept`: the one stored before (its delays stay allowed)."""
    if value in (None, {}):
        return {}
    if not isinstance(value, dict) or set(value) - set(REDELIVERY_KEYS):
        raise Invalid(
            f"messageRedelivery takes {', '.join(REDELIVERY_KEYS)}", "spec.messageRedelivery"
        )
    out = {}
    for key, item in value.items():
        field = f"spec.messageRedelivery.{key}"
        if key == "redeliveryDelayMultiplier":
            if isinstance(item, bool) or not isinstance(item, int | float) or not (
                math.isfinite(item) and 0 <= item <= MAX_DELAY_MULTIPLIER
            ):
                raise Invalid(f"must be a number from 0 to {MAX_DELAY_MULTIPLIER}", field)
            out[key] = item
        elif key == "maximumDeliveryAttempts":
            out[key] = _int_in(item, field, 0, MAX_DELIVERY_ATTEMPTS)
        else:
            out[key] = _int_in(item, field, 0, MAX_MILLISECONDS)
    _refuse_not_enforced(out, kept, "messageRedelivery")
    return out


def max_consumers(value) -> int:
    if value is None:
        return 1
    return _int_in(value, "spec.subscription.maxConsumers", 1, MAX_CONSUMERS)


def space_spec(spec: dict) -> None:
    """Refuses keys of an AddressSpace's spec that MaaS does not implement."""
    for key in spec:
        if key == "routerPolicy":
            raise Invalid("router limits are set by the operator (the address space plan), "
                          "not in the address space", "spec.routerPolicy")
        if key not in SPACE_SPEC_KEYS:
            raise Invalid(f"unknown field; an address space takes {', '.join(SPACE_SPEC_KEYS)}",
                          f"spec.{printable(key)}")


def username(value) -> str:
    if not isinstance(value, str) or not USERNAME.match(value):
        raise Invalid(
            "Use 1 to 64 letters, digits, '.', '_' and '-', starting and ending with a letter "
            "or digit",
            "spec.username",
        )
    return value


def password(authentication) -> str | None:
    """The clear password from spec.authentication (EnMasse: base64), or None if absent."""
    if authentication in (None, {}):
        return None
    if not isinstance(authentication, dict):
        raise Invalid("must be an object", "spec.authentication")
    kind = authentication.get("type", "password")
    if kind != "password":
        raise Invalid("only type 'password' is supported", "spec.authentication.type")
    encoded = authentication.get("password")
    if not isinstance(encoded, str) or not encoded:
        raise Invalid("a base64-encoded password is required", "spec.authentication.password")
    try:
        clear = base64.b64decode(encoded, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise Invalid("must be base64 of a UTF-8 password",
                      "spec.authentication.password") from None
    if len(clear) < 8:
        raise Invalid("the password needs at least 8 characters", "spec.authentication.password")
    return clear


def authorization(value, space_type: str) -> list[dict]:
    if value in (None, []):
        return []
    if not isinstance(value, list):
        raise Invalid("must be a list of {addresses, operations}", "spec.authorization")
    rules = []
    for i, rule in enumerate(value):
        field = f"spec.authorization[{i}]"
        if not isinstance(rule, dict) or set(rule) - {"addresses", "operations"}:
            raise Invalid("each rule has addresses and operations", field)
        operations = rule.get("operations")
        if not isinstance(operations, list) or not operations or any(
            op not in OPERATIONS for op in operations
        ):
            raise Invalid(f"operations must be a list of {', '.join(OPERATIONS)}",
                          f"{field}.operations")
        patterns = rule.get("addresses", [])
        if not isinstance(patterns, list) or any(
            not isinstance(p, str) or not p or " " in p for p in patterns
        ):
            raise Invalid("addresses must be a list of address patterns", f"{field}.addresses")
        if space_type == "standard" and any("*" in p[:-1] for p in patterns):
            raise Invalid("'*' is allowed only at the end of a pattern", f"{field}.addresses")
        if not patterns and not set(operations) <= {"view", "manage"}:
            raise Invalid("send and recv need address patterns", f"{field}.addresses")
        rules.append({"addresses": list(patterns), "operations": list(dict.fromkeys(operations))})
    return rules
