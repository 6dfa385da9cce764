"""Who may connect where and do what: messaging users and qdrouterd-style vhost policies.

Authentication checks a PLAIN password against the `io.maas.router.user` entities (salted
hashes). The address space (vhost) comes from a `user@vhost` username or the AMQP open
hostname; a user only ever gets into the vhost it belongs to. Authorization follows
qdrouterd's vhost `groups`: users -> limits and allowed source/target addresses.
"""

from dataclasses import dataclass

from . import entities as E
from .passwords import check_password
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

    def may_send(self, address: str) -> bool:
        return policy_list_matches(str(self.group.get("targets", "")), address)

    def may_receive(self, address: str) -> bool:
        return policy_list_matches(str(self.group.get("sources", "")), address)

    @property
    def allow_dynamic_source(self) -> bool:
        return bool(self.group.get("allowDynamicSource", False))


class Policy:
    def __init__(self, store: E.EntityStore):
        self.store = store

    def authenticate(self, login: str, password: str) -> set[str]:
        """Vhosts in which (login, password) is valid; empty if none."""
        username, _, vhost = login.partition("@")
        matched = set()
        for user in self.store.all(E.USER):
            if user["username"] != username and user["username"] != login:
                continue
            if vhost and user["username"] == username and user["vhost"] != vhost:
                continue
            if check_password(password, user["passwordHash"]):
                matched.add(user["vhost"])
        return matched

    def vhost(self, hostname: str) -> dict | None:
        for ent in self.store.all(E.VHOST):
            if ent["hostname"] == hostname:
                return ent
        return None

    def choose_vhost(self, login: str, hostname: str | None, allowed: set[str]) -> str | None:
        """The vhost of this connection, or None if the user may not be there."""
        _, _, from_login = login.partition("@")
        requested = hostname or ""
        if requested.startswith("vhost:"):
            requested = requested[len("vhost:"):]
        if from_login:
            return from_login if from_login in allowed else None
        if requested in allowed:
            return requested
        if requested and (self.vhost(requested) or self._is_user_vhost(requested)):
            return None  # names another tenant's space explicitly
        return next(iter(allowed)) if len(allowed) == 1 else None

    def _is_user_vhost(self, name: str) -> bool:
        return any(u["vhost"] == name for u in self.store.all(E.USER))

    def grant(self, vhost: str, login: str) -> Grant | None:
        """The policy group of `login` in `vhost`; None means no access at all."""
        ent = self.vhost(vhost)
        if ent is None:
            return None
        username = login.partition("@")[0]
        groups = ent.get("groups") or {}
        for name, group in groups.items():
            if name == "$default":
                continue
            users = [u.strip() for u in str(group.get("users", "")).split(",")]
            # `user@vhost` is how the agent names a space's user (the auth service's identity)
            if {username, login, f"{username}@{vhost}", "*"} & set(users):
                return Grant(vhost, group)
        if "$default" in groups:
            return Grant(vhost, groups["$default"])
        return None

    def connection_limits(self, vhost: str) -> dict[str, int]:
        ent = self.vhost(vhost) or {}
        keys = ("maxConnections", "maxConnectionsPerUser", "maxConnectionsPerHost")
        return {k: int(ent.get(k) or _UNLIMITED) for k in keys}
