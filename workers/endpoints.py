"""Where a space lives: the one lookup of its broker's and router's management endpoints.

Agents, the usage sampler and the portal's stats and purge all ask `of(space)` rather than
reading the control plane's own settings, so each reads and changes its space's own target:
on one machine (`MAAS_INFRA_BACKEND=local`) every standard space shares the local router, or each
router of the local mesh (config_service.routers), and every space is on the broker of the local
pool its creation recorded (`AddressSpace.broker`, config_service.brokers);
on Kubernetes a standard space has its own router and brokers (workers/infra), reached through
their Services with the space's own broker credentials, and brokered spaces are on the pool.
`MAAS_SPACE_ENDPOINTS` may name another function (dotted path) taking a space and returning
`SpaceEndpoints`.
"""
from dataclasses import dataclass

from django.conf import settings
from django.utils.module_loading import import_string

# The pool is the control plane's: it places each new space on a broker (config_service.brokers).
from config_service.brokers import (  # noqa: F401 - this module's interface too
    BrokerEndpoint,
    broker_pool,
    internal_ca,
    pooled_broker,
    shared_broker,
)
from config_service.routers import local_routers


@dataclass(frozen=True)
class RouterEndpoint:
    """A router's management ($management over AMQP 1.0)."""

    management_url: str
    admin_user: str
    admin_password: str
    name: str = "router"  # in a mesh: its router id, as status messages name it
    # A router of a space's own mesh (Kubernetes): the inter-router listeners ((host, port))
    # of the routers before it, which the router agent connects it to.
    peers: tuple = ()
    # What an `amqps://` management listener's certificate is checked against
    management_ca: str | None = None


@dataclass(frozen=True)
class SpaceEndpoints:
    broker: BrokerEndpoint
    # Every router of the space, each brought to its desired state; none: a brokered space.
    routers: tuple[RouterEndpoint, ...] = ()
    # A space with brokers of its own (Kubernetes): each by the clusterId its addresses'
    # placements name, `broker` the first. Empty: `broker` holds every address of the space.
    placed: tuple[tuple[str, BrokerEndpoint], ...] = ()

    @property
    def router(self) -> RouterEndpoint | None:
        """The first router: the one a single-router reader (the portal's stats) asks."""
        return self.routers[0] if self.routers else None

    @property
    def brokers(self) -> tuple[BrokerEndpoint, ...]:
        """Every broker of the space, each configured with the addresses placed on it."""
        return tuple(b for _, b in self.placed) or (self.broker,)

    def brokers_of(self, placement) -> list[BrokerEndpoint]:
        """The brokers an address's placement ([{"clusterId": ...}]) puts it on (a queue's
        partitions, a deadletter queue on every broker in use); the first broker for a
        placement that names none of the space's (one machine: no placement counts)."""
        by_cluster = dict(self.placed)
        found = [by_cluster[c] for c in dict.fromkeys(p.get("clusterId") for p in placement or ())
                 if c in by_cluster]
        return found or [self.broker]

    def partition(self, addresses, placement_of=lambda a: a.placement) -> list[tuple]:
        """Each broker of the space with the addresses placed on it (`placement_of(address)`),
        a broker with none included: it still holds the space's vhost and router login."""
        if not self.placed:
            return [(self.broker, list(addresses))]
        groups: dict = {b: [] for b in self.brokers}
        for a in addresses:
            for broker in self.brokers_of(placement_of(a)):
                groups[broker].append(a)
        return list(groups.items())

    def on(self, router: RouterEndpoint) -> "SpaceEndpoints":
        """These endpoints with `router` as the space's one router: what a reconcile of one
        router of the mesh works on."""
        return SpaceEndpoints(self.broker, (router,), self.placed)


def of(space) -> SpaceEndpoints:
    """The endpoints of `space` (an AddressSpace)."""
    path = getattr(settings, "MAAS_SPACE_ENDPOINTS", "")
    return import_string(path)(space) if path else by_backend(space)


def by_backend(space) -> SpaceEndpoints:
    if space.type == "standard" and settings.MAAS_INFRA_BACKEND == "kubernetes":
        return _kubernetes(space)
    return SpaceEndpoints(broker=pooled_broker(space.broker),
                          routers=shared_routers() if space.type == "standard" else ())


def shared_router() -> RouterEndpoint:
    """The first router of this machine (the router watch's and the tests' default)."""
    return shared_routers()[0]


def shared_routers() -> tuple[RouterEndpoint, ...]:
    """Every router of this machine: one, or each of the mesh."""
    return tuple(RouterEndpoint(r.management_url, settings.MAAS_ROUTER_ADMIN_USER,
                                settings.MAAS_ROUTER_ADMIN_PASSWORD, r.id,
                                management_ca=management_ca(r.management_url))
                 for r in local_routers())


def management_ca(url: str) -> str | None:
    """The certificate this machine's routers present on an `amqps://` management listener:
    the platform's (MAAS_ROUTER_TLS_CERT), which runplatform gives them."""
    return settings.MAAS_ROUTER_TLS_CERT if url.startswith("amqps:") else None


def _kubernetes(space) -> SpaceEndpoints:
    from workers.infra import manifests as m
    from workers.infra.backend import infra_secret, infra_settings, space_infra_of

    cfg, infra = infra_settings(), space_infra_of(space)
    password = infra_secret("broker-admin", infra.infra)
    # Every broker its addresses are placed on; a leaving one (Migrating, Draining) holds
    # none any more and is the drainer's.
    placed = tuple((b.cluster_id, _kubernetes_broker(m, cfg, infra, b, password))
                   for b in infra.brokers if b.state == "Active")
    broker = placed[0][1] if placed else BrokerEndpoint(
        m.broker_api_url(""), m.BROKER_ADMIN_USER, password, "", m.BROKER_AMQPS_PORT,
        amqps_port=m.BROKER_AMQPS_PORT)
    # The management listener admits the router admin only (through the auth service), and
    # only the space's agent may reach it (the router's NetworkPolicy). Each replica by its
    # own name: the agent configures every router of the space's mesh, and connects each to
    # the ones before it.
    pods = m.router_pod_hosts(infra, cfg)
    # Over TLS, the router's internal certificate checked against the internal CA bundle
    # (MAAS_INTERNAL_TLS_DIR/ca.pem, mounted in the agent's pod and the worker's).
    routers = tuple(RouterEndpoint(
        f"amqps://{host}:{m.ROUTER_MANAGEMENT_PORT}", settings.MAAS_ROUTER_ADMIN_USER,
        settings.MAAS_ROUTER_ADMIN_PASSWORD, host.split(".", 1)[0],
        tuple((peer, m.ROUTER_INTER_ROUTER_PORT) for peer in pods[:i]),
        management_ca=internal_ca() or None)
        for i, host in enumerate(pods))
    return SpaceEndpoints(broker=broker, routers=routers, placed=placed)


def _kubernetes_broker(m, cfg, infra, broker, password: str) -> BrokerEndpoint:
    """One broker StatefulSet of a space: reached through its Service (any ready node), and
    through each node's management API when it is a cluster (any node answers for the whole
    cluster, and its queues are then quorum queues: `BrokerEndpoint.cluster`)."""
    name = m.broker_name(infra.infra, broker.cluster_id)
    host = m.service_host(name, cfg)
    nodes = [f"{name}-{i}.{host}" for i in range(broker.replicas)] if broker.replicas > 1 \
        else [host]
    # TLS only (its certificate of the internal CA: `broker_ca`)
    return BrokerEndpoint(",".join(m.broker_api_url(n) for n in nodes),
                          m.BROKER_ADMIN_USER, password, host, m.BROKER_AMQPS_PORT,
                          name=broker.cluster_id, amqps_port=m.BROKER_AMQPS_PORT)
