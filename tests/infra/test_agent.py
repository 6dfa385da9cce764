"""The infra agent (kind "infra") on a space from the projections, and the choice of backend.

The Kubernetes API is the in-process fake (no API server can run on these machines); the
space, its addresses and the agents' states are real rows (pytest-django, PostgreSQL).
"""
import pytest
from django.conf import settings
from django.test import override_settings

from config_service import services
from config_service.models import AgentState
from core.context import Context
from workers.agents import infra as infra_agent
from workers.agents.runner import TransientError
from workers.infra import backend, internal_ca
from workers.infra import manifests as m
from workers.infra.controller import InfraController

from . import spaces
from .fake_kube import FakeKubernetes

CTX = Context(actor="test")


class EmptyDrainer:
    def drain(self, space, cluster_id, targets):
        return 0


@pytest.fixture
def kube():
    return FakeKubernetes()


@pytest.fixture
def agent(kube):
    return infra_agent.InfraAgent(InfraController(kube, EmptyDrainer(), spaces.CFG,
                                                      backend.infra_secret))


@pytest.fixture
def space(tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name="shop", type="standard",
                                      plan="standard-medium")
    for i in range(2):
        services.create_address(ctx=CTX, space=s, address=f"q{i}", type="queue",
                                plan="standard-large-queue")
    services.create_address(ctx=CTX, space=s, address="events", type="anycast",
                            plan="standard-small-anycast")
    s.refresh_from_db()
    return s


def test_space_infra_is_derived_from_the_scheduled_addresses(space):
    infra = backend.space_infra_of(space)
    assert infra.uid == str(space.uid) and infra.vhost == space.vhost
    assert [b.cluster_id for b in infra.brokers] == ["broker-0", "broker-1"]
    assert infra.router_replicas == 1  # 0.1 + 0.1 + 0.001


def test_reconcile_reports_readiness_into_the_space_status(space, agent, kube):
    report = agent.reconcile(space)
    assert "Router 0/1 ready" in report.space_error
    assert report.address_errors[f"{space.name}.events"] == {
        "message": "Router is not ready", "permanent": False}
    infra = m.infra_id(space.uid)
    kube.settle()
    kube.hold("StatefulSet", f"broker-1-{infra}", ready=0)
    kube.settle()
    report = agent.reconcile(space)
    # each broker a cluster of MAAS_BROKER_REPLICAS nodes
    assert report.space_error == f"Broker broker-1 0/{settings.MAAS_BROKER_REPLICAS} ready"
    broker1 = [n for n, e in report.address_errors.items()]
    assert len(broker1) == 1
    assert report.address_errors[broker1[0]]["message"] == "Broker broker-1 is not ready"
    kube.release("StatefulSet", f"broker-1-{infra}")
    kube.settle()
    report = agent.reconcile(space)
    assert report.space_error == "" and report.address_errors == {}


def test_teardown_waits_for_the_space_agents_then_collects_everything(space, agent, kube):
    agent.reconcile(space)
    AgentState.objects.create(space_uid=space.uid, kind="storage", torn_down=False)
    with pytest.raises(TransientError, match="storage agent"):
        agent.teardown(space)
    assert kube.objects
    AgentState.objects.filter(space_uid=space.uid).update(torn_down=True)
    agent.teardown(space)
    assert kube.names() == {internal_ca.SECRET}  # the platform's CA outlives every space


def test_brokered_spaces_need_no_infra(tenant, agent, kube):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name="b", type="brokered",
                                      plan="brokered-single-broker")
    assert agent.reconcile(s).space_error == ""
    agent.teardown(s)
    assert kube.objects == {}


def test_backend_is_chosen_by_setting():
    with override_settings(MAAS_INFRA_BACKEND="local"):
        assert infra_agent.infra_agent() is None
    with override_settings(MAAS_INFRA_BACKEND="kubernetes", MAAS_INFRA_NAMESPACE="infra",
                           MAAS_ROUTER_IMAGE="example/router:1"):
        agent = infra_agent.infra_agent()
        assert agent.kind == "infra"
        assert "controller" not in agent.__dict__  # no API client until it first runs
        cfg = backend.infra_settings()
        assert (cfg.namespace, cfg.router_image) == ("infra", "example/router:1")
        assert cfg.auth_service == ("maas-authservice.infra.svc", 5676)
    with override_settings(MAAS_INFRA_AUTH_SERVICE_HOST="auth.example.com",
                           MAAS_INFRA_AUTH_SERVICE_PORT=15676, MAAS_ROUTER_ADMIN_USER="root"):
        cfg = backend.infra_settings()
        assert cfg.auth_service == ("auth.example.com", 15676)
        assert cfg.router_admin_user == "root"
    with override_settings(MAAS_INFRA_BACKEND="elsewhere"), pytest.raises(ValueError):
        backend.backend()


def test_the_plan_s_infra_config_sizes_the_router_and_brokers(tenant, kube, agent):
    """infraConfigRef takes effect: a plan naming `default-minimal` gets its smaller router and
    brokers; a config of the operator's (MAAS_INFRA_CONFIGS) sets router replicas, CPU and the
    storage class; a change of the plan's config applies at the next reconcile."""
    import json

    from tenants.models import AddressSpacePlan
    AddressSpacePlan.objects.filter(name="standard-medium").update(
        infra_config_ref="default-minimal")
    s = services.create_address_space(ctx=CTX, tenant=tenant, name="sized", type="standard",
                                      plan="standard-medium")
    services.create_address(ctx=CTX, space=s, address="q", type="queue",
                            plan="standard-large-queue")
    s.refresh_from_db()
    agent.reconcile(s)
    infra = m.infra_id(s.uid)
    router = kube.find("StatefulSet", m.router_name(infra))
    container = router["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["memory"] == "128Mi"
    assert container["resources"]["requests"]["memory"] == "128Mi"
    broker = kube.find("StatefulSet", f"broker-0-{infra}")
    assert broker["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "memory"] == "512Mi"
    (claim,) = broker["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"

    own = {"big": {"router": {"minReplicas": 3, "resources": {"cpu": "2"}},
                   "broker": {"storageClassName": "fast-ssd", "minReplicas": 5}}}
    AddressSpacePlan.objects.filter(name="standard-medium").update(infra_config_ref="big")
    with override_settings(MAAS_INFRA_CONFIGS=json.dumps(own)):
        agent.reconcile(s)
    router = kube.find("StatefulSet", m.router_name(infra))
    assert router["spec"]["replicas"] == 3
    container = router["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"]["cpu"] == "2"
    assert container["resources"]["limits"]["memory"] == "256Mi"  # the platform's
    broker = kube.find("StatefulSet", f"broker-0-{infra}")
    (claim,) = broker["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert broker["spec"]["replicas"] == 5  # a RabbitMQ cluster of the plan's size


@pytest.mark.parametrize("configs, problem", [
    ("{nope", "is not JSON"),
    ('{"x": {"router": {"minReplicas": 0}}}', "router.minReplicas"),
    ('{"x": {"broker": {"minReplicas": true}}}', "broker.minReplicas"),
    ('{"x": {"broker": {"resources": {"memory": "lots"}}}}', "broker.resources.memory"),
    ('{"x": {"disk": {}}}', "takes router and broker"),
])
def test_a_bad_infra_config_setting_is_refused_naming_it(configs, problem):
    from django.core.exceptions import ImproperlyConfigured

    from config_service import infra_configs
    with override_settings(MAAS_INFRA_CONFIGS=configs):
        with pytest.raises(ImproperlyConfigured, match=problem):
            infra_configs.configs()
        (error,) = infra_configs.check()  # manage.py check, and so make run, stop on it
        assert problem in error.msg


def test_a_space_s_endpoint_gives_its_router_its_certificate_and_exposure(tenant, kube, agent):
    """spec.endpoints on Kubernetes: each standard space has its own router, so its AMQPS
    serves the messaging endpoint's certificate (the tenant's bundle here) to every client,
    and `expose.type` makes its Service a LoadBalancer or NodePort."""
    import base64

    from cryptography import x509

    from tests.certs import bundle

    tenant_bundle = bundle("mq.shop.example")
    s = services.create_address_space(
        ctx=CTX, tenant=tenant, name="exposed", type="standard", plan="standard-medium",
        spec={"endpoints": [{"name": "messaging", "cert": tenant_bundle.spec(),
                             "expose": {"type": "loadbalancer",
                                        "routeHost": "mq.shop.example"}}]})
    agent.reconcile(s)
    infra = m.infra_id(s.uid)
    secret = kube.find("Secret", m.tls_secret_name(infra))
    assert base64.b64decode(secret["data"]["tls.crt"]).decode() == tenant_bundle.chain
    assert base64.b64decode(secret["data"]["tls.key"]).decode() == tenant_bundle.key
    assert kube.find("Service", m.router_name(infra))["spec"]["type"] == "LoadBalancer"

    services.change_address_space_plan(
        ctx=CTX, space=s, plan="standard-medium",
        spec={"endpoints": [{"name": "messaging", "expose": {"type": "nodeport",
                                                             "routeHost": "mq.shop.example"}}]})
    s.refresh_from_db()
    agent.reconcile(s)
    assert kube.find("Service", m.router_name(infra))["spec"]["type"] == "NodePort"
    served = base64.b64decode(kube.find("Secret", m.tls_secret_name(infra))["data"]["tls.crt"])
    leaf = x509.load_pem_x509_certificates(served)[0]  # now the space's own CA's, same host
    assert served.decode() != tenant_bundle.chain
    assert leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value \
        .get_values_for_type(x509.DNSName) == ["mq.shop.example"]
