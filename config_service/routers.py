"""The routers of standard spaces on one machine: the one router, or a mesh of
MAAS_ROUTER_MESH qdrouterd interior routers, each on its own ports (maas/settings.py).

Every standard space is configured on each of them (workers.endpoints lists them, the router
agent brings each to the space's desired state), and a space's clients get each as a failover
list (`status.endpointStatuses[].failoverUrls`). On Kubernetes a space's routers are its own
(workers/infra), not these.
"""
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

from dataplane import qdrouterd


@dataclass(frozen=True)
class LocalRouter:
    """One router of this machine: where clients, the agents and its peers reach it."""

    id: str  # qdrouterd's router id, unique in the mesh
    host: str
    amqp_port: int
    amqps_port: int
    management_url: str
    metrics_port: int
    inter_router_port: int  # 0: not meshed (a single router)


def meshed() -> bool:
    return settings.MAAS_ROUTER_MESH > 1


def local_routers() -> list[LocalRouter]:
    """Router 1 on the router settings, then routers 2..MAAS_ROUTER_MESH on
    MAAS_ROUTER_MESH_PORT_BASE + 10 (k-1) + 0 (AMQP), 1 (AMQPS), 2 (management),
    3 (metrics), 4 (inter-router); router 1's inter-router listener on the base itself."""
    base, host = settings.MAAS_ROUTER_MESH_PORT_BASE, settings.MAAS_ROUTER_HOST
    mgmt = urlsplit(settings.MAAS_ROUTER_MANAGEMENT_URL)
    first = LocalRouter("maas-router-1" if meshed() else "maas", host,
                        settings.MAAS_ROUTER_AMQP_PORT, settings.MAAS_ROUTER_AMQPS_PORT,
                        settings.MAAS_ROUTER_MANAGEMENT_URL, settings.MAAS_ROUTER_METRICS_PORT,
                        base if meshed() else 0)
    routers = [first]
    for k in range(2, settings.MAAS_ROUTER_MESH + 1):
        at = base + 10 * (k - 1)
        routers.append(LocalRouter(
            f"maas-router-{k}", host, at, at + 1,
            f"{mgmt.scheme}://{mgmt.hostname or '127.0.0.1'}:{at + 2}", at + 3, at + 4))
    return routers


def failover_urls(scheme: str, host: str) -> list[str]:
    """Every router's listener for `scheme` (amqp, amqps) at `host`, the first first: the
    list a client reconnects through when its router goes away."""
    return [f"{scheme}://{host}:{r.amqp_port if scheme == 'amqp' else r.amqps_port}"
            for r in local_routers()]


def connectors_refusal() -> str | None:
    """Why this installation's routers cannot carry a space's `spec.connectors`, or None. Only
    qdrouterd on this machine (`QDROUTERD`) takes them: the embedded router's TLS profiles
    come from its command line alone (no CA or client certificate of a connector's own), and
    on Kubernetes the router agent cannot hand a space's router the connector's TLS files."""
    if settings.MAAS_INFRA_BACKEND == "kubernetes":
        return ("spec.connectors are not available on Kubernetes yet: the router agent cannot "
                "give a space's own router the connector's TLS files")
    if qdrouterd.binary() is None:
        return ("spec.connectors need qdrouterd: the embedded router does not carry "
                "connectors to remote endpoints (set QDROUTERD to a qdrouterd 1.19 build, "
                "docs/router.md)")
    return None
