"""One lookup says where a space's broker and router are (workers/endpoints.py), and every
reader asks it: with two spaces whose lookups name different brokers and routers, the storage
controller, the router agent, purge, the portal's stats and the usage sampler each talk to the
space's own. The two "brokers" are HTTP relays in front of the real RabbitMQ (tests/faults.py),
so every request is seen; the two routers are real embedded routers."""
import uuid
from urllib.parse import urlsplit

import pytest
from django.conf import settings

from config_service import services
from config_service.models import Address
from config_service.portal import stats
from tests.conftest import CTX, b64
from tests.faults import HttpFaultProxy
from tests.router.conftest import ADMIN_PASSWORD, RouterProcess
from workers import endpoints
from workers.agents import runner
from workers.agents.router import desired as rc
from workers.clients.qdr import Management
from workers.infra import manifests as m
from workers.infra.backend import queue_placement, space_infra_of
from workers.usage import sampler

pytestmark = pytest.mark.slow

WHERE: dict = {}  # space uid -> SpaceEndpoints, read by `lookup`


def lookup(space) -> endpoints.SpaceEndpoints:
    return WHERE[space.uid]


@pytest.fixture(scope="module")
def second_router():
    proc = RouterProcess()
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def relays():
    pair = [HttpFaultProxy(settings.RABBITMQ_API_URL.removesuffix("/api")) for _ in range(2)]
    yield pair
    for relay in pair:
        relay.close()


def _space(tenant, relay, router):
    space = services.create_address_space(ctx=CTX, tenant=tenant,
                                          name=f"e{uuid.uuid4().hex[:6]}", type="standard",
                                          plan="standard-medium")
    services.create_address(ctx=CTX, space=space, address="orders", type="queue",
                            plan="standard-small-queue")
    services.create_messaging_user(
        ctx=CTX, space=space, username="app",
        authentication={"type": "password", "password": b64("app-password")},
        authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
    shared = endpoints.shared_broker()
    WHERE[space.uid] = endpoints.SpaceEndpoints(
        broker=endpoints.BrokerEndpoint(relay.url + "/api", shared.api_user,
                                        shared.api_password, shared.amqp_host,
                                        shared.amqp_port),
        routers=(endpoints.RouterEndpoint(f"amqp://127.0.0.1:{router.mgmt_port}", "admin",
                                          ADMIN_PASSWORD),))
    return space


def _owners_on(router) -> set[str]:
    mgmt = Management(f"amqp://127.0.0.1:{router.mgmt_port}", "admin", ADMIN_PASSWORD)
    try:
        names = {str(row.get("name", "")) for row in mgmt.query(rc.VHOST)}
    finally:
        mgmt.close()
    return {n.split(":")[1] for n in names if n.startswith("maas:")}


def test_every_reader_goes_to_the_space_s_own_broker_and_router(
        tenant, relays, router, second_router, settings, redis_server):
    settings.MAAS_SPACE_ENDPOINTS = "tests.workers.test_space_endpoints.lookup"
    first = _space(tenant, relays[0], router)
    second = _space(tenant, relays[1], second_router)
    try:
        for space in (first, second):
            runner.run(space.uid, "storage")
            runner.run(space.uid, "router")
            services.purge_address(ctx=CTX, space=space, name=f"{space.name}.orders")
            runner.run(space.uid, "storage")
            stats.address_stats(space, list(space.addresses.all()))
        rows = sampler.collect()

        for relay, mine, other in ((relays[0], first, second), (relays[1], second, first)):
            assert any(mine.vhost in line for line in relay.seen)
            assert any(line.startswith("DELETE") and "/contents" in line for line in relay.seen)
            assert not [line for line in relay.seen if other.vhost in line]
        assert first.vhost in _owners_on(router) and second.vhost not in _owners_on(router)
        assert second.vhost in _owners_on(second_router)
        assert first.vhost not in _owners_on(second_router)
        sampled = {(r["space"], r["source"]) for r in rows if r["address"] == "orders"}
        assert (first.name, f"router:amqp://127.0.0.1:{router.mgmt_port}") in sampled
        assert (second.name, f"router:amqp://127.0.0.1:{second_router.mgmt_port}") in sampled
    finally:
        for space in (first, second):
            services.delete_address_space(ctx=CTX, space=space)
            runner.run(space.uid, "router")
            runner.run(space.uid, "storage")


def test_on_kubernetes_a_standard_space_lives_on_its_own_services(tenant, settings):
    settings.MAAS_INFRA_BACKEND = "kubernetes"
    standard = services.create_address_space(ctx=CTX, tenant=tenant, name="k8s",
                                             type="standard", plan="standard-medium")
    services.create_address(ctx=CTX, space=standard, address="orders", type="queue",
                            plan="standard-small-queue")
    brokered = services.create_address_space(ctx=CTX, tenant=tenant, name="shared",
                                             type="brokered", plan="brokered-single-broker")
    own = endpoints.by_backend(standard)
    assert ".svc" in own.broker.api_url and ".svc" in own.router.management_url
    # each router replica by its pod's name, each linked to the ones before it (the mesh)
    infra = space_infra_of(standard)
    assert len(own.routers) == infra.router_replicas >= 1
    for i, router in enumerate(own.routers):
        assert router.management_url.startswith(f"amqps://{router.name}.")  # TLS inside
        assert router.name == f"{m.router_name(infra.infra)}-{i}"
        assert [host for host, _ in router.peers] == [
            r.management_url.split("//")[1].split(":")[0] for r in own.routers[:i]]
    assert own.broker.api_password == endpoints.by_backend(standard).broker.api_password
    assert len(own.broker.api_password) >= 40  # random, kept encrypted: workers/credentials.py
    assert endpoints.by_backend(brokered).broker == endpoints.shared_broker()
    assert endpoints.by_backend(brokered).router is None


def test_on_kubernetes_every_broker_of_a_standard_space_is_an_endpoint_of_its_own(
        tenant, settings):
    settings.MAAS_INFRA_BACKEND = "kubernetes"
    settings.MAAS_BROKER_REPLICAS = 3
    space = services.create_address_space(ctx=CTX, tenant=tenant, name="two",
                                          type="standard", plan="standard-medium")
    for address in ("orders", "invoices"):
        services.create_address(ctx=CTX, space=space, address=address, type="queue",
                                plan="standard-small-queue")
    Address.objects.filter(space=space, address="invoices").update(
        placement=[{"clusterId": "broker-1", "containerId": "broker-1-0", "state": "Active"}])
    where = endpoints.by_backend(space)
    infra = space_infra_of(space)
    assert [c for c, _ in where.placed] == [b.cluster_id for b in infra.brokers] == [
        "broker-0", "broker-1"]
    first, second = where.brokers
    assert where.broker == first and first != second
    # each a cluster of three nodes, reached through each node's API: quorum queues
    for cluster, broker in where.placed:
        name = m.broker_name(infra.infra, cluster)
        namespace = settings.MAAS_INFRA_NAMESPACE or "maas"
        assert broker.cluster and [urlsplit(u).hostname for u in broker.api_urls] == [
            f"{name}-{i}.{name}.{namespace}.svc" for i in range(3)]
    by_name = {a.address: a for a in space.addresses.all()}
    assert dict((b, [a.address for a in mine]) for b, mine in where.partition(
        sorted(by_name.values(), key=lambda a: a.address))) == {
        first: ["orders"], second: ["invoices"]}
    # where a draining broker's messages of each queue go (workers/infra/drain.py)
    assert queue_placement(infra, "invoices") == ("broker-1",)
    assert queue_placement(infra, "deleted-long-ago") == ()
    settings.MAAS_BROKER_REPLICAS = 1  # a broker of one node is no cluster
    assert not endpoints.by_backend(space).broker.cluster
