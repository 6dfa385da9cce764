"""The infra controller's reconcile loop against an in-process fake of the Kubernetes API.

No Kubernetes API server can run on these machines (no container runtime or etcd), so
`fake_kube.FakeKubernetes` stands in for one: server-side apply with a field manager, schema
validation of every applied manifest, owner-reference garbage collection and workload
readiness. Only the RabbitMQ drainer is replaced (by `FakeDrainer`): the brokers it would
drain are pods on the (absent) cluster.
"""
import dataclasses

import pytest

from workers.infra import internal_ca
from workers.infra import manifests as m
from workers.infra.controller import (
    DRAIN_SETTLING,
    DRAIN_UNREACHABLE,
    InfraController,
    workload_ready,
)

from . import spaces
from .fake_kube import FakeKubernetes

INFRA = m.infra_id(spaces.SMALL_UID)
NS = spaces.CFG.namespace


class FakeDrainer:
    """Stored messages per broker, drained by `per_call` on each call (a shovel at work)."""

    def __init__(self, stored: dict[str, int] | None = None, per_call: int = 0):
        self.stored = dict(stored or {})
        self.per_call = per_call
        self.calls: list[tuple] = []

    def drain(self, space, cluster_id, targets):
        self.calls.append((cluster_id, targets))
        left = max(self.stored.get(cluster_id, 0) - self.per_call, 0)
        self.stored[cluster_id] = left
        return left


@pytest.fixture
def kube():
    return FakeKubernetes()


@pytest.fixture
def drainer():
    return FakeDrainer()


@pytest.fixture
def controller(kube, drainer):
    return InfraController(kube, drainer, spaces.CFG,
                           secret=lambda purpose, infra: f"test-{purpose}-{infra}")


def sts(kube, name):
    return kube.find("StatefulSet", name)


def test_create_applies_everything_with_owner_references_and_becomes_ready(kube, controller):
    status = controller.reconcile(spaces.small())
    assert not status.is_ready and status.phase == "Configuring"
    assert "Router 0/1 ready" in status.messages

    owner = kube.find("ConfigMap", f"space-{INFRA}")
    assert owner is not None
    for obj in kube.objects.values():
        if obj is owner or obj["metadata"]["name"] == internal_ca.SECRET:  # the platform's
            continue
        assert obj["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"]
        assert obj["metadata"]["managedFields"][0]["manager"] == "maas-infra"
    assert {f"router-{INFRA}", f"broker-0-{INFRA}"} <= kube.names("StatefulSet")
    assert kube.names("Deployment") == {f"agent-{INFRA}"}
    assert f"router-{INFRA}-tls" in kube.names("Secret")

    kube.settle()
    status = controller.reconcile(spaces.small())
    assert status.is_ready and status.phase == "Active" and status.messages == []
    assert status.as_dict()["brokerStatuses"] == [
        {"clusterId": "broker-0", "state": "Active", "replicas": 1, "readyReplicas": 1}]


def test_reconcile_is_idempotent(kube, controller):
    controller.reconcile(spaces.small())
    kube.settle()
    controller.reconcile(spaces.small())
    before = {k: o["metadata"]["resourceVersion"] for k, o in kube.objects.items()}
    controller.reconcile(spaces.small())
    after = {k: o["metadata"]["resourceVersion"] for k, o in kube.objects.items()}
    assert before == after  # same certificate, same derived passwords: nothing changes


def test_status_names_the_workloads_that_are_not_ready(kube, controller):
    controller.reconcile(spaces.medium())
    infra = m.infra_id(spaces.MEDIUM_UID)
    kube.hold("StatefulSet", f"broker-sharded-e4cb6d59-{infra}", ready=1)
    kube.settle()
    status = controller.reconcile(spaces.medium())
    assert status.messages == ["Broker broker-sharded-e4cb6d59 1/2 ready"]
    assert status.broker_ready("broker-0") and not status.broker_ready("broker-sharded-e4cb6d59")


def test_scale_up_by_credits_adds_routers_and_brokers(kube, controller):
    controller.reconcile(spaces.small())
    kube.settle()
    status = controller.reconcile(spaces.plan_changed())
    assert sts(kube, f"router-{INFRA}")["spec"]["replicas"] == 2
    assert {f"broker-{i}-{INFRA}" for i in range(4)} <= kube.names("StatefulSet")
    assert "Router 1/2 ready" in status.messages or "Router 0/2 ready" in status.messages
    owner = kube.find("ConfigMap", f"space-{INFRA}")
    assert owner["data"]["plan"] == "standard-medium"
    kube.settle()
    assert controller.reconcile(spaces.plan_changed()).is_ready


def test_scale_down_drains_the_removed_broker_before_deleting_it(kube, drainer, controller):
    controller.reconcile(spaces.plan_changed())
    kube.settle()
    assert controller.reconcile(spaces.plan_changed()).is_ready
    smaller = dataclasses.replace(spaces.plan_changed(), brokers=spaces.plan_changed().brokers[:2])
    drainer.stored = {"broker-2": 7, "broker-3": 0}
    drainer.per_call = 4
    # A remaining broker restarts: the removed ones stay Migrating until it is ready again.
    kube.hold("StatefulSet", f"broker-1-{INFRA}", ready=0)
    kube.settle()

    status = controller.reconcile(smaller)  # Active -> Migrating
    assert [(b.cluster_id, b.state) for b in status.brokers[2:]] == [
        ("broker-2", "Migrating"), ("broker-3", "Migrating")]
    assert "Broker broker-2 is Migrating" in status.messages and not status.is_ready
    status = controller.reconcile(smaller)
    assert [b.state for b in status.brokers[2:]] == ["Migrating", "Migrating"]
    assert drainer.calls == []

    kube.release("StatefulSet", f"broker-1-{INFRA}")
    kube.settle()
    status = controller.reconcile(smaller)  # Migrating -> Draining; broker-3 is empty
    assert [(b.cluster_id, b.state, b.messages_left) for b in status.brokers[2:]] == [
        ("broker-2", "Draining", 3)]
    assert ("broker-2", ("broker-0", "broker-1")) in drainer.calls
    assert f"broker-3-{INFRA}" not in kube.names("StatefulSet")
    assert f"broker-3-{INFRA}" not in kube.names("Service")
    assert f"broker-3-{INFRA}-config" not in kube.names("ConfigMap")
    assert sts(kube, f"broker-2-{INFRA}")["metadata"]["annotations"][
        m.ANNOTATION_BROKER_STATE] == "Draining"
    assert "Broker broker-2 is Draining (3 messages left)" in status.messages

    status = controller.reconcile(smaller)  # drained: removed
    assert f"broker-2-{INFRA}" not in kube.names("StatefulSet")
    assert [b.cluster_id for b in status.brokers] == ["broker-0", "broker-1"]
    # The agent reads the space's brokers from the database at each reconcile: no roll-out.
    assert status.messages == []
    kube.settle()
    assert controller.reconcile(smaller).is_ready
    assert drainer.stored == {"broker-2": 0, "broker-3": 0}


@pytest.mark.parametrize("answer, shown", [(DRAIN_UNREACHABLE, "broker unreachable"),
                                           (DRAIN_SETTLING, "confirming it is empty")])
def test_a_broker_the_drainer_cannot_vouch_for_is_kept(kube, controller, answer, shown):
    class Unsure:
        def drain(self, space, cluster_id, targets):
            return answer

    controller.drainer = Unsure()
    controller.reconcile(spaces.plan_changed())
    kube.settle()
    smaller = dataclasses.replace(spaces.plan_changed(), brokers=spaces.plan_changed().brokers[:1])
    for _ in range(4):
        kube.settle()
        status = controller.reconcile(smaller)
    assert {f"broker-{i}-{INFRA}" for i in range(4)} <= kube.names("StatefulSet")
    assert {b.state for b in status.brokers[1:]} == {"Draining"}
    assert f"Broker broker-3 is Draining ({shown})" in status.messages
    assert not status.is_ready


def test_delete_collects_everything_through_owner_references(kube, controller):
    controller.reconcile(spaces.medium())
    controller.reconcile(spaces.small())
    kube.settle()
    assert controller.teardown(spaces.small()) is True
    left = {o["metadata"]["labels"].get(m.LABEL_INFRA) for o in kube.objects.values()}
    assert left == {m.infra_id(spaces.MEDIUM_UID), None}  # the other space and the CA stay
    assert ("delete", "ConfigMap", f"space-{INFRA}") in kube.calls
    assert controller.teardown(spaces.small()) is True  # again: nothing to do


def test_resync_recreates_a_workload_deleted_behind_its_back(kube, controller):
    controller.reconcile(spaces.small())
    kube.settle()
    kube.delete("apps/v1", "StatefulSet", NS, f"router-{INFRA}")
    kube.delete("v1", "Secret", NS, f"router-{INFRA}-tls")
    kube.delete("apps/v1", "Deployment", NS, f"agent-{INFRA}")
    status = controller.reconcile(spaces.small())
    assert f"router-{INFRA}" in kube.names("StatefulSet")
    assert f"agent-{INFRA}" in kube.names("Deployment")
    assert "Router 0/1 ready" in status.messages and "Agent not ready" in status.messages
    kube.settle()
    assert controller.reconcile(spaces.small()).is_ready


def test_resync_repairs_an_edited_workload_and_a_deleted_owner(kube, controller):
    controller.reconcile(spaces.small())
    router = kube.objects[("apps/v1", "StatefulSet", NS, f"router-{INFRA}")]
    router["spec"]["replicas"] = 5  # someone scaled it by hand
    kube.delete("v1", "ConfigMap", NS, f"space-{INFRA}")  # cascades
    assert kube.names() == {internal_ca.SECRET}
    controller.reconcile(spaces.small())
    assert sts(kube, f"router-{INFRA}")["spec"]["replicas"] == 1


def test_stale_status_counts_as_not_ready():
    obj = {"kind": "StatefulSet", "metadata": {"generation": 3}, "spec": {"replicas": 2},
           "status": {"observedGeneration": 2, "readyReplicas": 2}}
    assert workload_ready(obj) == (2, 0)
    obj["status"]["observedGeneration"] = 3
    assert workload_ready(obj) == (2, 2)
    assert workload_ready(None) == (0, 0)


def test_the_certificate_is_made_once_and_names_the_router_service(kube, controller):
    from cryptography import x509

    controller.reconcile(spaces.small())
    secret = kube.find("Secret", f"router-{INFRA}-tls")
    import base64

    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"router-{INFRA}.maas.svc" in names.get_values_for_type(x509.DNSName)
    controller.reconcile(spaces.small())
    assert kube.find("Secret", f"router-{INFRA}-tls")["data"] == secret["data"]
