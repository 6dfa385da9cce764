"""Configuration entities, stored in memory with qdrouterd's type and attribute names.

Only what the management node may CREATE/UPDATE/DELETE lives here; read-only operational types
(router.address, connection, router, router.link) are computed by `views.py`. A restart loses
everything on purpose: the router agent re-applies its configuration on resync.
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
                  "connectionStatus": "CONNECTING", "connectionMsg": None},
        enums={"role": ("route-container", "normal")},
    ),
    VHOST: Schema(
        defaults={"hostname": None, "maxConnections": 65535, "maxConnectionsPerUser": 65535,
                  "maxConnectionsPerHost": 65535, "allowUnknownUser": False, "groups": {}},
        required=("hostname",),
    ),
}

# The vhost group settings the embedded policy enforces (policy.py), by qdrouterd's names. A
# group is a free map: other keys, such as qdrouterd's remoteHosts, are kept and ignored.
GROUP_KEYS = ("users", "sources", "targets", "allowDynamicSource", "maxSessions", "maxSenders",
              "maxReceivers")

# attributes the router computes; a CREATE/UPDATE may not set them
_READ_ONLY = {"operStatus", "lastError", "connectionStatus", "connectionMsg"}
# never returned by QUERY/READ
_SECRET = {"saslPassword"}


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.lower() in ("true", "yes", "1")
    return bool(value)


class EntityStore:
    """Entities by type; each has `name`, `identity`, `type` plus its attributes."""

    def __init__(self):
        self._by_type: dict[str, dict[str, dict]] = {t: {} for t in SCHEMAS}
        self._ids = itertools.count(1)

    def types(self):
        return SCHEMAS.keys()

    def all(self, etype: str) -> list[dict]:
        return list(self._by_type.get(etype, {}).values())

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
        if etype == ADDRESS and any(  # as qdrouterd: one address configuration per prefix
                (other["prefix"], other["pattern"]) == (entity["prefix"], entity["pattern"])
                for other in self._by_type[etype].values()):
            raise EntityError(400, "Already exists")
        entity.update({"name": name, "identity": str(next(self._ids)), "type": etype})
        self._by_type[etype][name] = entity
        return entity

    def update(self, entity: dict, attrs: dict) -> dict:
        etype = entity["type"]
        merged = {**entity, **{k: v for k, v in (attrs or {}).items()
                               if k not in ("name", "identity", "type")}}
        validated = self._validate(etype, SCHEMAS[etype], merged)
        entity.update(validated)
        return entity

    def delete(self, entity: dict) -> None:
        self._by_type[entity["type"]].pop(entity["name"], None)

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
            try:
                ent["port"] = str(int(ent["port"]))
            except (TypeError, ValueError):
                raise EntityError(400, "Invalid port {!r}".format(ent["port"])) from None
        if etype == VHOST:
            self._validate_vhost(ent)
        for key in _READ_ONLY & ent.keys():
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
        for key in ("maxConnections", "maxConnectionsPerUser", "maxConnectionsPerHost"):
            try:
                ent[key] = int(ent[key])
            except (TypeError, ValueError):
                raise EntityError(400, f"Invalid value for {key}") from None
        ent["groups"] = groups
