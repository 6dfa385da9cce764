"""Example standard spaces for the infra tests, placed by the real credit scheduler."""
from config_service import scheduling
from workers.infra import manifests as m

SMALL_UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
MEDIUM_UID = "11111111-2222-3333-4444-555555555555"

# (router, broker, partitions) of EnMasse's example address plans.
PLANS = {
    "standard-small-anycast": ("anycast", 0.001, None, 1),
    "standard-large-anycast": ("anycast", 0.1, None, 1),
    "standard-small-queue": ("queue", 0.001, 0.01, 1),
    "standard-medium-queue": ("queue", 0.01, 0.1, 1),
    "standard-large-queue": ("queue", 0.1, 1.0, 1),
    "standard-medium-partitioned-queue": ("queue", 0.01, 0.1, 3),
    "standard-xlarge-topic": ("topic", 0.2, 2.0, 1),
}


def plan_status(plan: str) -> dict:
    _, router, broker, partitions = PLANS[plan]
    resources = {k: v for k, v in (("router", router), ("broker", broker)) if v is not None}
    return {"name": plan, "resources": resources, "partitions": partitions}


def schedule(addresses: list[tuple[str, str]]) -> list[tuple]:
    """(type, plan_status, placement) of (address, plan) pairs, placed in order."""
    usage, out = scheduling.Usage(), []
    for address, plan in addresses:
        kind, ps = PLANS[plan][0], plan_status(plan)
        placement = scheduling.place("standard", kind, address, ps, usage)
        usage.add(kind, ps, placement)
        out.append((kind, ps, placement))
    return out


def small() -> m.SpaceInfra:
    """standard-small: one small queue and an anycast address: one router, one broker."""
    rows = schedule([("orders", "standard-small-queue"), ("events", "standard-small-anycast")])
    return m.space_infra(SMALL_UID, "acme", "shop", "standard-small", rows)


def medium() -> m.SpaceInfra:
    """standard-medium: 12 medium queues (two pooled brokers: 10 + 2), an x-large topic (a
    sharded broker of 2 replicas) and 12 large anycast addresses (router credits 0.12 + 0.2 +
    1.2 -> 2 routers)."""
    addresses = [(f"q{i}", "standard-medium-queue") for i in range(12)]
    addresses.append(("prices", "standard-xlarge-topic"))
    addresses += [(f"a{i}", "standard-large-anycast") for i in range(12)]
    return m.space_infra(MEDIUM_UID, "acme", "trading", "standard-medium", schedule(addresses))


def plan_changed() -> m.SpaceInfra:
    """The small space after its plan became standard-medium and its queue a partitioned one
    (three brokers) plus a large queue (a broker of its own) and 15 large anycast (2 routers)."""
    addresses = [("orders", "standard-medium-partitioned-queue"),
                 ("archive", "standard-large-queue"),
                 ("events", "standard-small-anycast")]
    addresses += [(f"a{i}", "standard-large-anycast") for i in range(15)]
    return m.space_infra(SMALL_UID, "acme", "shop", "standard-medium", schedule(addresses))


CFG = m.InfraSettings(namespace="maas", control_plane_image="ghcr.io/maas-project/maas:test")
OWNER_UID = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
CERT = m.Certificate("-----BEGIN CERTIFICATE-----\nTEST\n-----END CERTIFICATE-----\n",
                     "-----BEGIN PRIVATE KEY-----\nTEST\n-----END PRIVATE KEY-----\n")

MESH_CERT = m.Certificate("-----BEGIN CERTIFICATE-----\nMESH\n-----END CERTIFICATE-----\n",
                          "-----BEGIN PRIVATE KEY-----\nMESH\n-----END PRIVATE KEY-----\n")


def _fake(name: str) -> m.Certificate:
    return m.Certificate(f"-----BEGIN CERTIFICATE-----\n{name}\n-----END CERTIFICATE-----\n",
                         f"-----BEGIN PRIVATE KEY-----\n{name}\n-----END PRIVATE KEY-----\n")


TRUST = "-----BEGIN CERTIFICATE-----\nINTERNAL CA\n-----END CERTIFICATE-----\n"


def certificates(space: m.SpaceInfra, *more_brokers: str) -> m.Certificates:
    """Stand-in PEMs (the golden files stay stable): the controller's real ones are tested
    in test_internal_tls.py."""
    clusters = [b.cluster_id for b in space.brokers] + list(more_brokers)
    return m.Certificates(tls=CERT, mesh=MESH_CERT, internal=_fake("INTERNAL"),
                          brokers={c: _fake(c.upper()) for c in clusters}, trust=TRUST,
                          auth_ca=TRUST)


def all_manifests(space: m.SpaceInfra) -> list[dict]:
    return [m.owner_manifest(space, CFG)] + m.space_manifests(
        space, CFG, OWNER_UID, certificates(space), "broker-password", "erlang-cookie")
