"""Configuration entities, stored in memory with qdrouterd's type and attribute names.

Only what the management node may CREATE/UPDATE/DELETE lives here; read-only operational types
(router.address, connection, router, router.link) are computed by `views.py`. With a state
directory the configuration journal (config_journal.py) brings them back after a restart;
without one a restart loses them, and the router watch has the agents apply them again.
"""

import itertools
from dataclasses import dataclass, field
from typing import Any

from .patterns import normalise_prefix

PREFIX = "org.apache.qpid.dispatch."
ADDRESS = PREFIX + "router.config.address"
LINK_ROUTE = PREFIX + "router.config.linkRoute"
AUTO_LINK = PREFIX + "router.config.autoLink"
CONNECTOR = PREFIX + "connector"
VHOST = PREFIX + "vhost"


class EntityError(Exception):
    def __init__(self, status: int, description: str):
        super().__init__(description)
        self.status = status
        self.description = description


@dataclass(frozen=True)
class Schema:
    defaults: dict[str, Any]
    required: tuple[str, ...] = ()
    one_of: tuple[str, ...] = ()  # exactly one of these must be set
    enums: dict[str, tuple] = field(default_factory=dict)


SCHEMAS: dict[str, Schema] = {
    ADDRESS: Schema(
        defaults={"prefix": None, "pattern": None, "distribution": "balanced",
                  "waypoint": False, "ingressPhase": None, "egressPhase": None,
                  "priority": -1, "enableFallback": False},
        one_of=("prefix", "pattern"),
        enums={"distribution": ("balanced", "multicast", "closest")},
    ),
    LINK_ROUTE: Schema(
        defaults={"prefix": None, "pattern": None, "direction": None, "connection": None,
                  "containerId": None, "addExternalPrefix": None, "delExternalPrefix": None,
                  "distribution": "linkBalanced", "operStatus": "inactive"},
        required=("direction",),
        one_of=("prefix", "pattern"),
        enums={"direction": ("in", "out")},
    ),
    AUTO_LINK: Schema(
        defaults={"address": None, "direction": None, "phase": None, "connection": None,
                  "containerId": None, "externalAddress": None, "fallback": False,
                  "operStatus": "inactive", "lastError": None},
        required=("address", "direction"),
        enums={"direction": ("in", "out")},
    ),
    CONNECTOR: Schema(
        defaults={"host": "127.0.0.1", "port": "5672", "role": "route-container",
                  "saslUsername": None, "saslPassword": None, "saslMechanisms": None,
                  "virtualHost": None, "idleTimeoutSeconds": 16, "maxFrameSize": 16384,
                  # TLS to the peer: one of the router's client profiles (engine.client_tls)
                  "sslProfile": None, "verifyHostname": True,
                  "connectionStatus": "CONNECTING", "connectionMsg": None},
        enums={"role": ("route-container", "normal")},
    ),
    VHOST: Schema(
        # exactMessageTargets (MaaS extension, read-only): a message's `to` on an anonymous
        # link is authorised and routed as written; qdrouterd 1.19 routes it after dropping a
        # `scheme:/` head, so the agent allows anonymous senders only where this is true.
        # aliases: kept as qdrouterd's; the embedded router needs none (the login's `@<vhost>`
        # picks the space, and a hostname that is no space's, as an alias, is not refused).
        defaults={"hostname": None, "aliases": None, "maxConnections": 65535,
                  "maxConnectionsPerUser": 65535, "maxConnectionsPerHost": 65535,
                  "maxMessageSize": 0, "allowUnknownUser": False, "groups": {},
                  "exactMessageTargets": True},
        required=("hostname",),
    ),
}

# The vhost group settings the embedded policy enforces (policy.py), by qdrouterd's names. A
# group is a free map: other keys, such as qdrouterd's remoteHosts, are kept and ignored.
GROUP_KEYS = ("users", "sources", "targets", "allowDynamicSource", "allowAnonymousSender",
              "maxSessions", "maxSenders", "maxReceivers", "maxMessageSize")

# attributes the router computes; a CREATE/UPDATE may not set them
READ_ONLY = {"operStatus", "lastError", "connectionStatus", "connectionMsg",
              "exactMessageTargets"}
# never returned by QUERY/READ
_SECRET = {"saslPassword"}


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.lower() in ("true", "yes", "1")
    return bool(value)


def owner_of(name: str) -> str:
    """The owner part of an entity name, up to its second `:` (`maas:<vhost>:` for the router
    agent's entities); "" for a name with fewer colons."""
    first = name.find(":")
    second = name.find(":", first + 1) if first >= 0 else -1
    return name[:second + 1] if second >= 0 else ""


def is_wildcard(pattern: str) -> bool:
    return any(token in ("*", "#") for token in pattern.replace("/", ".").split("."))


def token_prefixes(address: str):
    """Every prefix that `prefix_matches` accepts for `address`: "", each run of tokens, and
    the address itself (so a lookup is one dict probe per token, not a scan)."""
    yield ""
    for i, ch in enumerate(address):
        if ch in "./" and i:
            yield address[:i]
    yield address


class EntityStore:
    """Entities by type; each has `name`, `identity`, `type` plus its attributes.

    Indexed so that no lookup scans the fleet: by owner (a reconcile reads one space), by
    vhost hostname (every connection), by connector (autoLinks to attach when it connects) and,
    for addresses and link routes, by prefix and exact pattern (every link attach). Only
    wildcard patterns are matched one by one."""

    def __init__(self):
        self._by_type: dict[str, dict[str, dict]] = {t: {} for t in SCHEMAS}
        self._ids = itertools.count(1)
        self._owners: dict[str, dict[str, dict[str, dict]]] = {t: {} for t in SCHEMAS}
        self._hostnames: dict[str, dict] = {}
        self._by_connection: dict[str, dict[str, dict]] = {}
        self._prefixes: dict[str, dict[str, dict[str, dict]]] = {ADDRESS: {}, LINK_ROUTE: {}}
        self._exact: dict[str, dict[str, dict[str, dict]]] = {ADDRESS: {}, LINK_ROUTE: {}}
        self._wildcards: dict[str, dict[str, dict]] = {ADDRESS: {}, LINK_ROUTE: {}}

    def types(self):
        return SCHEMAS.keys()

    def all(self, etype: str) -> list[dict]:
        return list(self._by_type.get(etype, {}).values())

    def count(self, etype: str) -> int:
        return len(self._by_type.get(etype, {}))

    def owned(self, etype: str, name_prefix: str) -> list[dict]:
        """Entities of the type whose name starts with `name_prefix`: from the owner index when
        the prefix is an owner (`maas:<vhost>:`), else by a scan."""
        if owner_of(name_prefix) == name_prefix and name_prefix:
            return list(self._owners.get(etype, {}).get(name_prefix, {}).values())
        return [e for e in self.all(etype) if e["name"].startswith(name_prefix)]

    def vhost(self, hostname: str) -> dict | None:
        return self._hostnames.get(hostname)

    def autolinks_of(self, connection: str) -> list[dict]:
        """The autoLinks through this connector, and those that name a container instead."""
        return [*self._by_connection.get(connection, {}).values(),
                *self._by_connection.get("", {}).values()]

    def candidates(self, etype: str, address: str) -> list[dict]:
        """The entities of ADDRESS or LINK_ROUTE that may match `address`, in creation order:
        those whose prefix is a token prefix of it, whose pattern is it exactly, and every
        wildcard pattern. The caller applies qdrouterd's precedence."""
        found: dict[str, dict] = {}
        prefixes = self._prefixes[etype]
        for prefix in token_prefixes(address):
            found.update(prefixes.get(prefix, {}))
        found.update(self._exact[etype].get(address, {}))
        found.update(self._wildcards[etype])
        return sorted(found.values(), key=lambda e: int(e["identity"]))

    def find(self, etype: str, name: str | None = None, identity: str | None = None) -> dict:
        table = self._by_type.get(etype)
        if table is None:
            raise EntityError(404, f"Unknown entity type: {etype}")
        if name is not None and name in table:
            return table[name]
        if identity is not None:
            for ent in table.values():
                if ent["identity"] == str(identity) or ent["name"] == identity:
                    return ent
        raise EntityError(404, "Entity not found: %s" % (name or identity))

    def create(self, etype: str, name: str | None, attrs: dict) -> dict:
        schema = SCHEMAS.get(etype)
        if schema is None:
            raise EntityError(400, f"Cannot create entity of type {etype}")
        attrs = dict(attrs or {})
        name = name or attrs.get("name")
        if not name:
            raise EntityError(400, "No name specified")
        if name in self._by_type[etype]:
            raise EntityError(400, "Name conflicts with an existing entity")
        entity = self._validate(etype, schema, {**schema.defaults, **attrs})
        if etype == ADDRESS and self._same_address(entity):
            raise EntityError(400, "Already exists")  # as qdrouterd: one per prefix/pattern
        entity.update({"name": name, "identity": str(next(self._ids)), "type": etype})
        self._by_type[etype][name] = entity
        self._index(entity)
        return entity

    def update(self, entity: dict, attrs: dict) -> dict:
        etype = entity["type"]
        merged = {**entity, **{k: v for k, v in (attrs or {}).items()
                               if k not in ("name", "identity", "type")}}
        validated = self._validate(etype, SCHEMAS[etype], merged)
        self._unindex(entity)
        entity.update(validated)
        self._index(entity)
        return entity

    def delete(self, entity: dict) -> None:
        if self._by_type[entity["type"]].pop(entity["name"], None) is not None:
            self._unindex(entity)

    def _same_address(self, entity: dict) -> bool:
        if entity.get("prefix") is not None:
            same = self._prefixes[ADDRESS].get(entity["prefix"], {}).values()
        else:
            same = self.candidates(ADDRESS, entity["pattern"])
        return any((other["prefix"], other["pattern"]) == (entity["prefix"], entity["pattern"])
                   for other in same)

    def _slots(self, entity: dict):
        """The index maps this entity belongs in, each with its key there."""
        etype, name = entity["type"], entity["name"]
        yield self._owners[etype], owner_of(name)
        if etype == VHOST:
            yield None, entity.get("hostname")
        if etype == AUTO_LINK:  # "": by containerId, any connection may be the one
            yield self._by_connection, entity.get("connection") or ""
        if etype in self._prefixes:
            if entity.get("prefix") is not None:
                yield self._prefixes[etype], entity["prefix"]
            elif is_wildcard(entity.get("pattern") or ""):
                yield self._wildcards, etype
            elif entity.get("pattern") is not None:
                yield self._exact[etype], entity["pattern"]

    def _index(self, entity: dict) -> None:
        for table, key in self._slots(entity):
            if table is None:
                self._hostnames[key] = entity
            else:
                table.setdefault(key, {})[entity["name"]] = entity

    def _unindex(self, entity: dict) -> None:
        for table, key in self._slots(entity):
            if table is None:
                if self._hostnames.get(key) is entity:
                    del self._hostnames[key]
                    continue
            else:
                bucket = table.get(key, {})
                bucket.pop(entity["name"], None)
                if not bucket and table is not self._wildcards:
                    table.pop(key, None)

    @staticmethod
    def public(entity: dict) -> dict:
        return {k: v for k, v in entity.items() if k not in _SECRET}

    def _validate(self, etype: str, schema: Schema, ent: dict) -> dict:
        for key in ent:
            if key not in schema.defaults and key not in ("name", "identity", "type"):
                raise EntityError(400, f"Unknown attribute {key} for {etype}")
        for key in schema.required:
            if ent.get(key) in (None, ""):
                raise EntityError(400, f"Missing required attribute {key}")
        if schema.one_of:
            given = [k for k in schema.one_of if ent.get(k) not in (None, "")]
            if len(given) != 1:
                raise EntityError(400, "Exactly one of {} is required".format(", ".join(schema.one_of)))
        for key, allowed in schema.enums.items():
            if ent.get(key) not in allowed:
                raise EntityError(400, f"Invalid value for {key}: {ent.get(key)!r}")
        if etype in (ADDRESS, LINK_ROUTE) and ent.get("prefix"):
            ent["prefix"] = normalise_prefix(ent["prefix"])
        if etype == ADDRESS:
            ent["waypoint"] = _bool(ent["waypoint"])
        if etype in (LINK_ROUTE, AUTO_LINK):
            if not ent.get("connection") and not ent.get("containerId"):
                raise EntityError(400, "One of connection or containerId is required")
        if etype == AUTO_LINK and ent.get("phase") is not None:
            ent["phase"] = int(ent["phase"])
        if etype == CONNECTOR:
            ent["verifyHostname"] = _bool(ent["verifyHostname"])
            try:
                ent["port"] = str(int(ent["port"]))
            except (TypeError, ValueError):
                raise EntityError(400, "Invalid port {!r}".format(ent["port"])) from None
        if etype == VHOST:
            self._validate_vhost(ent)
        for key in READ_ONLY & ent.keys():
            ent[key] = ent.get(key, schema.defaults.get(key))
        return ent

    @staticmethod
    def _validate_vhost(ent: dict) -> None:
        groups = ent.get("groups") or {}
        if not isinstance(groups, dict):
            raise EntityError(400, "groups must be a map of group name to settings")
        for gname, group in groups.items():
            if not isinstance(group, dict):
                raise EntityError(400, f"group {gname} must be a map")
        for key in ("maxConnections", "maxConnectionsPerUser", "maxConnectionsPerHost",
                    "maxMessageSize"):
            try:
                ent[key] = int(ent[key])
            except (TypeError, ValueError):
                raise EntityError(400, f"Invalid value for {key}") from None
        ent["groups"] = groups
