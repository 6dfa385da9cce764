"""The router configuration one address space needs, as qdrouterd management entities.

Like EnMasse's agent (agent/lib/router_config.js): anycast and multicast are router
addresses; a queue is a waypoint address with an autoLink pair to its broker queue; a
deadletter queue and a subscription an autoLink `in` only; a topic a linkRoute pair to the
broker's exchange, and one to its fanout exchange for receivers of the whole topic. Every
address is qualified `<vhost>/<address>` (qdrouterd's `multiTenant` prefix), and every entity
name starts with `maas:<vhost>:`, so the agent only ever touches what it created for this
space.
"""
from typing import NamedTuple

from django.conf import settings

from config_service import space_endpoints
from config_service.validation import TOPIC_FANOUT_PREFIX
from config_service.wire import amqp_queue
from workers.agents.router import connectors as remote

ADDRESS = "org.apache.qpid.dispatch.router.config.address"
AUTO_LINK = "org.apache.qpid.dispatch.router.config.autoLink"
LINK_ROUTE = "org.apache.qpid.dispatch.router.config.linkRoute"
CONNECTOR = "org.apache.qpid.dispatch.connector"
LISTENER = "org.apache.qpid.dispatch.listener"
VHOST = "org.apache.qpid.dispatch.vhost"
SSL_PROFILE = remote.SSL_PROFILE  # a remote connector's TLS (spec.connectors)
ROUTER_ADDRESS = "org.apache.qpid.dispatch.router.address"
# The container of the usage holds: it never connects, so their autoLinks never attach.
USAGE_HOLD_CONTAINER = "maas-usage-hold"

# Applied in this order, deleted in the reverse order (links before what they refer to).
# Messaging users are no entity: every router relays SASL to the auth service, which reads them
# from the database (dataplane/authservice); the vhost policy names them `user@vhost`.
ENTITY_TYPES = (VHOST, SSL_PROFILE, CONNECTOR, ADDRESS, AUTO_LINK, LINK_ROUTE)
WRITE_ONLY = {"saslPassword"}  # never returned by the router: not compared
# Every attribute `desired_entities` writes, and the autoLinks' and connectors' status: what a
# diff compares, all a whole read of a shared router keeps (tables.py). A key missing here would
# read as a difference and have its entity made again (tests/workers/test_router_tables.py).
ATTRIBUTES = {
    VHOST: frozenset({"hostname", "groups", "aliases", "maxConnections",
                      "maxConnectionsPerUser", "maxConnectionsPerHost"}),
    SSL_PROFILE: frozenset({"caCertFile", "certFile", "privateKeyFile"}),
    CONNECTOR: frozenset({"host", "port", "role", "saslUsername", "virtualHost",
                          "sslProfile", "saslMechanisms", "verifyHostname",
                          "idleTimeoutSeconds", "maxFrameSize", "connectionStatus",
                          "connectionMsg"}),
    ADDRESS: frozenset({"prefix", "distribution", "waypoint"}),
    AUTO_LINK: frozenset({"address", "direction", "phase", "containerId", "connection",
                          "externalAddress", "operStatus"}),
    LINK_ROUTE: frozenset({"prefix", "pattern", "direction", "connection", "delExternalPrefix",
                           "addExternalPrefix"}),
}
# The router watch's marker (`router.config.address`): not `maas:<vhost>:...`, so no space's
# agent ever takes it for its own.
WATCH_MARKER = "maas-watch"
FANOUT_PREFIX = TOPIC_FANOUT_PREFIX  # the storage controller's fanout exchange of each topic


USAGE_HOLD = "usage-hold:"
# qdrouterd's dynamic addresses (`amqp:/_topo/0/<router>/temp.<id>`) as policy targets.
DYNAMIC_TARGETS = ("_topo/0/*", "amqp:/_topo/0/*")


def owner_prefix(vhost: str) -> str:
    return f"maas:{vhost}:"


def is_usage_hold(name: str) -> bool:
    """True for the autoLink of a usage hold (`maas:<vhost>:usage-hold:<address>`)."""
    return name.split(":", 2)[-1].startswith(USAGE_HOLD)


def _policy_list(patterns) -> str:
    return ",".join(sorted(set(patterns)))


def router_policy(plan_policy: dict | None) -> dict:
    """EnMasse's router policy (infra config `router.policy`): the operator's settings, with the
    space plan's own limits over them. Never the space's spec: that is the tenant's to write,
    and a tenant must not lift its own limits (spaces stored before may still carry one)."""
    return {**settings.MAAS_ROUTER_POLICY, **(plan_policy or {})}


class RouterFeatures(NamedTuple):
    """Which MaaS extensions the router has, read from its schema (GET-ATTRIBUTES): the agent
    uses an extension only where it exists, so the same agent drives qdrouterd and the
    embedded router."""

    connector_virtual_host: bool  # connector.virtualHost: the router picks the broker's vhost
    # router.address.countersEpoch: the router keeps an address's counters while it has no
    # link (and across restarts); qdrouterd frees an idle address and its counters with it.
    keeps_counters: bool = True
    # vhost.exactMessageTargets: an anonymous sender's `to` is checked and routed as written.
    # qdrouterd 1.19 checks it as written but routes it after dropping a `scheme:/` head, so a
    # target `news/*` would reach `news/x:/_local/$management`: no anonymous senders there.
    exact_message_targets: bool = True
    # The router serves this space alone (qdrouterd with the space's vhost as its tenant
    # listeners' policyVhost, the Kubernetes layout): its dynamic addresses, router-wide
    # `_topo/0/<router>/temp.<id>`, are all this space's, so users with send rules may reply to
    # them. Its configuration guards every other `_topo` address (dataplane/qdrouterd.py).
    serves_one_space: bool = False

    @classmethod
    def of(cls, schema: dict) -> "RouterFeatures":
        return cls(connector_virtual_host="virtualHost" in schema.get(CONNECTOR, ()),
                   keeps_counters="countersEpoch" in schema.get(ROUTER_ADDRESS, ()),
                   exact_message_targets="exactMessageTargets" in schema.get(VHOST, ()))


EMBEDDED = RouterFeatures(connector_virtual_host=True)


class BrokerLogin(NamedTuple):
    """How the router reaches the space's broker: its AMQP listener and the router's login."""

    host: str
    port: int
    username: str
    password: str
    tls: bool = False  # over TLS, the listener's certificate checked (BROKER_SSL_PROFILE)
    # The placements' clusterId of the broker (a space with brokers of its own, Kubernetes):
    # its addresses' autoLinks and link routes go through its connector; "": every address
    cluster: str = ""


# The embedded router's client TLS profile for the brokers' listeners (its --broker-ca).
BROKER_SSL_PROFILE = "broker"


def desired_entities(space, addresses, users, broker: "BrokerLogin | tuple[BrokerLogin, ...]",
                     throttled: bool = False, plan_policy: dict | None = None,
                     features: RouterFeatures = EMBEDDED) -> tuple[dict, dict]:
    """({(entity type, name): attributes}, {address name: [its entity keys]}) for one space;
    `broker`: where the router connects to the space's broker vhost, and as whom (or each
    broker of a space with several, the first one's connector `broker`, and each address
    through the broker its placement names);
    `plan_policy`: the router_policy of the space's plan; `features`: the router's extensions."""
    vhost, prefix = space.vhost, owner_prefix(space.vhost)
    out: dict = {}
    by_address: dict = {}

    def add(etype, suffix, _address=None, **attrs):
        out[(etype, prefix + suffix)] = attrs
        if _address is not None:
            by_address.setdefault(_address.name, []).append((etype, prefix + suffix))

    policy = router_policy(plan_policy)
    limits = {k: int(policy[k])
              for k in ("maxSessions", "maxSenders", "maxReceivers", "maxMessageSize")
              if policy.get(k) is not None}
    if throttled:
        # Over quota: no new sender. The embedded router refuses at maxSenders 0 with
        # amqp:resource-limit-exceeded; qdrouterd reads 0 as "no limit", so the targets go
        # too (amqp:unauthorized-access there).
        limits["maxSenders"] = 0
    groups = {}
    for user in users:
        send, recv = [], []
        for rule in user.authorization:
            ops = set(rule["operations"])
            patterns = rule["addresses"] or ["*"]
            if "send" in ops or "manage" in ops:
                send += patterns
            if "recv" in ops or "manage" in ops:
                recv += patterns
        # `user@vhost`: the identity the auth service vouches for (qdrouterd matches the
        # authenticated id exactly); qdrouterd refuses every host unless remoteHosts says so.
        if send and features.serves_one_space:
            # Replies to the router's dynamic addresses, as the requester got them (with the
            # `amqp:/` head) or without it; on a router shared by spaces these would reach
            # another space's reply-to, so only a router of this space gets them.
            send += list(DYNAMIC_TARGETS)
        groups[f"user-{user.username}"] = {
            "users": f"{user.username}@{vhost}", "remoteHosts": "*",
            "targets": "" if throttled else _policy_list(send), "sources": _policy_list(recv),
            # Request/response: a reply-to is a dynamic address; replies may come on an
            # anonymous link, each message's `to` checked against the targets.
            "allowDynamicSource": True,
            "allowAnonymousSender": bool(send) and not throttled
            and features.exact_message_targets,
            **limits,
        }
    # The endpoints' host names (spec.endpoints) are the vhost's too: a TLS client sends the
    # host it checks the certificate against as its AMQP open hostname, which qdrouterd's
    # policy and address prefix follow.
    hosts = space_endpoints.hosts(space.spec.get("endpoints"))
    # maxMessageSize goes in each group: qdrouterd 1.19 takes none on the vhost by management
    add(VHOST, "vhost", hostname=vhost, groups=groups,
        **({"aliases": ",".join(hosts)} if hosts else {}),
        **{k: int(policy[k]) for k in ("maxConnections", "maxConnectionsPerUser",
                                         "maxConnectionsPerHost")
           if policy.get(k)})  # 0: no such limit

    # The space's connectors to remote endpoints (spec.connectors): space-wide, as the policy.
    out.update(remote.desired(vhost, prefix, space.spec, LINK_ROUTE, CONNECTOR))

    logins = (broker,) if isinstance(broker, BrokerLogin) else tuple(broker)
    connectors = {login.cluster: connector_name(login, i) for i, login in enumerate(logins)}
    stored = [a for a in addresses if a.type in ("queue", "topic", "subscription", "deadletter")]
    if stored:
        # Without the virtualHost extension the connector reaches the vhost relay, which
        # selects the vhost from the login's `@<vhost>` (qdrouterd 1.19 sends its `host`).
        vhost_choice = {"virtualHost": f"vhost:{vhost}"} if features.connector_virtual_host else {}
        for i, login in enumerate(logins):
            add(CONNECTOR, connector_name(login, i), host=login.host, port=str(login.port),
                role="route-container", saslUsername=login.username,
                saslPassword=login.password, **vhost_choice,
                **({"sslProfile": BROKER_SSL_PROFILE} if login.tls else {}))
    first = connector_name(logins[0], 0)
    for a in addresses:
        # The connectors of the brokers its placement names (a queue's partitions, a
        # deadletter queue on each broker in use; a sharded topic's one cluster), else the
        # first broker's. An autoLink through the first keeps its name; one through another
        # broker's gets the connector's name after it.
        names = [connectors[c] for c in dict.fromkeys(
            p.get("clusterId") for p in getattr(a, "placement", None) or ()) if c in connectors]
        links = [(prefix + name, "" if name == first else f"@{name}")
                 for name in names or [first]]
        connection = links[0][0]  # a topic's: its link routes name one broker
        qualified = f"{vhost}/{a.address}"
        if a.type in ("anycast", "multicast"):
            add(ADDRESS, f"address:{a.address}", a, prefix=qualified,
                distribution="balanced" if a.type == "anycast" else "multicast",
                waypoint=False)
            if not features.keeps_counters:
                # A usage hold: qdrouterd keeps an address (and its delivery counters) while an
                # autoLink refers to it, so the address's last link detaching loses no count.
                # Its container never connects: the autoLink never attaches, moves nothing, and
                # no status waits for it (is_usage_hold).
                add(AUTO_LINK, f"{USAGE_HOLD}{a.address}", None, address=qualified,
                    direction="in", phase=0, containerId=USAGE_HOLD_CONTAINER)
        elif a.type in ("queue", "deadletter"):
            add(ADDRESS, f"address:{a.address}", a, prefix=qualified, distribution="balanced",
                waypoint=True)
            directions = ("in", "out") if a.type == "queue" else ("in",)
            for connection, suffix in links:
                for direction in directions:
                    add(AUTO_LINK, f"autolink:{a.address}:{direction}{suffix}", a,
                        address=qualified, direction=direction, connection=connection,
                        externalAddress=amqp_queue(a.address))
        elif a.type == "topic":
            # Senders publish to the exchange; the routing key is the rest of the address
            # (`news/sports.football`) or else the message subject. Receivers of `news/<key>`
            # bind with that key (RabbitMQ's topic syntax: `.` between levels, `*` one level,
            # `#` any), and receivers of the bare topic get all of it (binding key '#'): an
            # exact pattern is more specific than the prefix, in qdrouterd and here alike.
            # The external address is made from the vhost-qualified one (as qdrouterd does
            # under multiTenant): `<vhost>/` comes off, `/exchange/` goes on.
            add(LINK_ROUTE, f"linkroute:{a.address}:in", a, prefix=qualified, direction="in",
                connection=connection, delExternalPrefix=f"{vhost}/",
                addExternalPrefix="/exchange/")
            add(LINK_ROUTE, f"linkroute:{a.address}:out", a, prefix=qualified, direction="out",
                connection=connection, delExternalPrefix=f"{vhost}/",
                addExternalPrefix="/exchange/")
            # A receiver of the bare topic gets all of it from the topic's fanout exchange
            # (`$maas.all.<topic>`, bound to the topic with `#`): qdrouterd cannot make
            # `/exchange/news/#` of `news` (no suffix, and no prefix as long as the address).
            add(LINK_ROUTE, f"linkroute:{a.address}:out-all", a, pattern=qualified,
                direction="out", connection=connection, delExternalPrefix=f"{vhost}/",
                addExternalPrefix=f"/exchange/{FANOUT_PREFIX}")
        elif a.type == "subscription":
            # Its durable queue, consumed like a queue: a waypoint fed by an `in` autoLink.
            queue = a.broker_object_name
            add(ADDRESS, f"address:{queue}", a, prefix=f"{vhost}/{queue}",
                distribution="balanced", waypoint=True)
            for connection, suffix in links:
                add(AUTO_LINK, f"autolink:{queue}:in{suffix}", a, address=f"{vhost}/{queue}",
                    direction="in", connection=connection, externalAddress=amqp_queue(queue))
    return out, by_address


def is_space_wide(key: tuple) -> bool:
    """Whether an entity is the space's own rather than an address's: its vhost policy, its
    broker and mesh connectors, and everything of its remote connectors (spec.connectors)."""
    return key[0] in (VHOST, CONNECTOR) or remote.connector_of(key[1]) is not None


def connector_name(login: BrokerLogin, index: int) -> str:
    """`broker` for the space's first broker (and its one, as ever), `broker/<clusterId>` for
    each other: adding a broker to a space leaves the first's connector and its links be."""
    return "broker" if index == 0 else f"broker/{login.cluster}"


# The router's static configuration names the TLS of the links between a space's routers.
MESH_SSL_PROFILE = "mesh"


def mesh_connectors(vhost: str, peers) -> dict:
    """The inter-router connectors of one router of a space's mesh to its peers ((host, port),
    the routers before it: each pair is linked once), over the mutual TLS of the static
    configuration's `mesh` profile, the peer's name checked."""
    prefix = owner_prefix(vhost)
    return {(CONNECTOR, f"{prefix}mesh:{host}"): {
        "host": host, "port": str(port), "role": "inter-router",
        "sslProfile": MESH_SSL_PROFILE, "saslMechanisms": "EXTERNAL", "verifyHostname": True}
        for host, port in peers}


def differs(desired: dict, actual: dict) -> bool:
    """True if the router's entity does not carry every desired attribute value."""
    for key, value in desired.items():
        if key in WRITE_ONLY:
            continue
        have = actual.get(key)
        if isinstance(value, bool | int) and not isinstance(value, bool) and have is not None:
            try:
                have = int(have)
            except (TypeError, ValueError):
                return True
        if have != value:
            return True
    return False
