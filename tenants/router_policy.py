"""Router limits per address space plan (an operator's choice, never a tenant's): validation.

They are merged over settings.MAAS_ROUTER_POLICY by the router agent (qdrouterd's vhost policy:
connections per space, per user and per client host, sessions, senders and receivers per
connection of each user, and the largest message).
"""
from django.core.exceptions import ValidationError

# qdrouterd takes maxSessions as an AMQP channel count (16 bits); the others are bounded so
# that a typo cannot lift a space's limits to "unlimited".
ROUTER_POLICY_BOUNDS = {
    "maxConnections": 1_000_000,
    "maxConnectionsPerUser": 1_000_000,
    "maxConnectionsPerHost": 1_000_000,
    "maxSessions": 65_535,
    "maxSenders": 1_000_000,
    "maxReceivers": 1_000_000,
    "maxMessageSize": 1 << 27,  # 128 MiB, RabbitMQ's own largest message by default
}


def validate_router_policy(value) -> None:
    if not isinstance(value, dict):
        raise ValidationError("Router policy must be an object, e.g. {\"maxConnections\": 100}.")
    for key, limit in value.items():
        bound = ROUTER_POLICY_BOUNDS.get(key)
        if bound is None:
            raise ValidationError(f"Unknown router policy key {key!r}; use "
                                  f"{', '.join(ROUTER_POLICY_BOUNDS)}.")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= bound:
            raise ValidationError(f"{key} must be an integer from 1 to {bound}.")
