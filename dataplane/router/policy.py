"""Who may connect where and do what: messaging users and qdrouterd-style vhost policies.

Authentication is the auth service's (sasl_relay.py): a connection's user is the identity it
vouched for, `user@vhost`, and that vhost (address space) is the only one the connection may
use; an AMQP open hostname naming another space is refused. Authorization follows qdrouterd's
vhost `groups`: users -> limits and allowed source/target addresses.
"""

from dataclasses import dataclass

from . import entities as E
from .patterns import policy_list_matches

UNAUTHORIZED = "amqp:unauthorized-access"
NOT_FOUND = "amqp:not-found"
RESOURCE_LIMIT = "amqp:resource-limit-exceeded"

_UNLIMITED = 1 << 30


@dataclass
class Grant:
    """What one user may do in one vhost (the matching policy group)."""

    vhost: str
    group: dict
    vhost_max_message_size: int = 0  # the vhost's maxMessageSize, where the group has none

    def _limit(self, key: str) -> int:
        value = self.group.get(key)
        return _UNLIMITED if value in (None, "") else int(value)

    @property
    def max_sessions(self) -> int:
        return self._limit("maxSessions")

    @property
    def max_senders(self) -> int:
        return self._limit("maxSenders")

    @property
    def max_receivers(self) -> int:
        return self._limit("maxReceivers")

    @property
    def max_message_size(self) -> int:
        """Bytes of one message this user may send; 0: no limit (qdrouterd: the group's,
        else the vhost's)."""
        return int(self.group.get("maxMessageSize") or self.vhost_max_message_size or 0)

    def may_send(self, address: str) -> bool:
        return policy_list_matches(str(self.group.get("targets", "")), address)

    def may_receive(self, address: str) -> bool:
        return policy_list_matches(str(self.group.get("sources", "")), address)

    @property
    def allow_dynamic_source(self) -> bool:
        return bool(self.group.get("allowDynamicSource", False))

    @property
    def allow_anonymous_sender(self) -> bool:
        """qdrouterd's allowAnonymousSender: a link with no target, `to` on each message (whose
        address is authorised per message)."""
        return bool(self.group.get("allowAnonymousSender", False))

    @property
    def may_send_somewhere(self) -> bool:
        """Whether the user may send at all: what replying to a dynamic address (a reply-to
        of the same space) takes, as a requester's `$temp` address is in nobody's rules."""
        return bool(str(self.group.get("targets", "")).strip())


class Policy:
    def __init__(self, store: E.EntityStore):
        self.store = store

    def vhost(self, hostname: str) -> dict | None:
        return self.store.vhost(hostname)

    def choose_vhost(self, identity: str, hostname: str | None) -> str | None:
        """The vhost of this connection: the identity's (`user@vhost`), unless the open
        hostname (`NAME` or `vhost:NAME`) names another space's; None means refused."""
        _, _, vhost = identity.rpartition("@")
        requested = hostname or ""
        if requested.startswith("vhost:"):
            requested = requested[len("vhost:"):]
        if not vhost:
            return None
        if requested and requested != vhost and self.vhost(requested) is not None:
            return None
        return vhost

    def grant(self, vhost: str, login: str) -> Grant | None:
        """The policy group of `login` in `vhost`; None means no access at all."""
        ent = self.vhost(vhost)
        if ent is None:
            return None
        username = login.rpartition("@")[0] or login
        groups = ent.get("groups") or {}
        for name, group in groups.items():
            if name == "$default":
                continue
            users = [u.strip() for u in str(group.get("users", "")).split(",")]
            # `user@vhost` is how the agent names a space's user (the auth service's identity)
            if {username, login, f"{username}@{vhost}", "*"} & set(users):
                return Grant(vhost, group, int(ent.get("maxMessageSize") or 0))
        if "$default" in groups:
            return Grant(vhost, groups["$default"], int(ent.get("maxMessageSize") or 0))
        return None

    def connection_limits(self, vhost: str) -> dict[str, int]:
        ent = self.vhost(vhost) or {}
        keys = ("maxConnections", "maxConnectionsPerUser", "maxConnectionsPerHost")
        return {k: int(ent.get(k) or _UNLIMITED) for k in keys}
