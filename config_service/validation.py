"""Checks of names, address specs and authorization rules; each failure names its field."""
import base64
import binascii
import re

from .errors import Invalid

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
    if not isinstance(value, str) or not ADDRESS.match(value):
        raise Invalid("spec.address is required: 1 to 200 characters, no spaces", "spec.address")
    if value.startswith("_!") or value.startswith("$") or "::" in value:
        raise Invalid("spec.address must not start with '_!' or '$' nor contain '::'",
                      "spec.address")
    return value


def address_type(value, space_type: str) -> str:
    allowed = ADDRESS_TYPES_BY_SPACE[space_type]
    if value not in allowed:
        raise Invalid(
            f"spec.type must be one of {', '.join(allowed)} in a {space_type} address space",
            "spec.type",
        )
    return value


def _non_negative_int(value, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Invalid("must be a non-negative integer", field)
    return value


def message_ttl(value) -> dict:
    if value in (None, {}):
        return {}
    if not isinstance(value, dict) or set(value) - set(TTL_KEYS):
        raise Invalid("messageTtl takes minimum and maximum (milliseconds)", "spec.messageTtl")
    ttl = {k: _non_negative_int(v, f"spec.messageTtl.{k}") for k, v in value.items()}
    if ttl.get("minimum") and ttl.get("maximum") and ttl["minimum"] > ttl["maximum"]:
        raise Invalid("minimum must not exceed maximum", "spec.messageTtl")
    return ttl


def message_redelivery(value) -> dict:
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
            if isinstance(item, bool) or not isinstance(item, int | float) or item < 0:
                raise Invalid("must be a non-negative number", field)
            out[key] = item
        else:
            out[key] = _non_negative_int(item, field)
    return out


def max_consumers(value) -> int:
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Invalid("must be a positive integer", "spec.subscription.maxConsumers")
    return value


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
