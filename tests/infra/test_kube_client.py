"""The real Kubernetes client (workers.infra.kube) over HTTP, against the fake API's REST front.

No Kubernetes API server can run on these machines, so `fake_kube.serve` answers the few REST
calls the controller makes (server-side apply PATCH, GET, list by label, DELETE) from the
in-process fake. What is checked is the wire: paths, content type, fieldManager and force,
the bearer token, label selectors, 404 as None, errors as KubernetesError.
"""
import json

import pytest
from kubernetes import client as k8s

from workers.infra import manifests as m
from workers.infra.controller import InfraController
from workers.infra.kube import KubernetesClient, KubernetesError, resource_path

from . import spaces
from .fake_kube import FakeKubernetes, serve


class EmptyDrainer:
    def drain(self, space, cluster_id, targets):
        return 0


@pytest.fixture
def wire():
    fake = FakeKubernetes()
    server, url, seen = serve(fake, token="t0ken")
    config = k8s.Configuration(host=url, api_key={"authorization": "t0ken"},
                               api_key_prefix={"authorization": "Bearer"})
    yield fake, KubernetesClient(k8s.ApiClient(config), timeout=10), seen
    server.shutdown()


def test_paths():
    assert resource_path("v1", "Secret", "ns", "a") == "/api/v1/namespaces/ns/secrets/a"
    assert resource_path("apps/v1", "StatefulSet", "ns") == \
        "/apis/apps/v1/namespaces/ns/statefulsets"
    assert resource_path("networking.k8s.io/v1", "NetworkPolicy", "ns", "p") == \
        "/apis/networking.k8s.io/v1/namespaces/ns/networkpolicies/p"


def test_server_side_apply_get_list_delete_over_http(wire):
    fake, client, seen = wire
    manifest = m.owner_manifest(spaces.small(), spaces.CFG)
    live = client.apply(manifest, "maas-infra")
    assert live["metadata"]["uid"] and live["data"]["plan"] == "standard-small"
    patch = seen[-1]
    assert patch["method"] == "PATCH"
    assert patch["content_type"] == "application/apply-patch+yaml"
    assert "fieldManager=maas-infra" in patch["path"] and "force=true" in patch["path"]
    assert json.loads(patch["body"]) == manifest
    assert patch["authorization"] == "Bearer t0ken"

    name = manifest["metadata"]["name"]
    assert client.get("v1", "ConfigMap", "maas", name)["metadata"]["uid"] == \
        live["metadata"]["uid"]
    assert client.get("v1", "ConfigMap", "maas", "missing") is None
    (item,) = client.list("v1", "ConfigMap", "maas", {m.LABEL_INFRA: spaces.small().infra})
    assert item["kind"] == "ConfigMap" and item["apiVersion"] == "v1"
    assert "labelSelector=" in seen[-1]["path"]
    assert client.list("v1", "ConfigMap", "maas", {m.LABEL_INFRA: "other"}) == []
    assert client.delete("v1", "ConfigMap", "maas", name) is True
    assert client.delete("v1", "ConfigMap", "maas", name) is False
    assert fake.objects == {}


def test_refusals_are_errors(wire):
    _, client, _ = wire
    bad = m.owner_manifest(spaces.small(), spaces.CFG)
    bad["data"] = {"n": 1}  # ConfigMap data must be strings
    with pytest.raises(KubernetesError) as info:
        client.apply(bad, "maas-infra")
    assert info.value.status == 422 and not info.value.transient


def test_the_controller_reconciles_through_the_real_client(wire):
    fake, client, _ = wire
    controller = InfraController(client, EmptyDrainer(), spaces.CFG,
                                 lambda purpose, infra: f"test-{purpose}")
    controller.reconcile(spaces.small())
    fake.settle()
    assert controller.reconcile(spaces.small()).is_ready
    assert controller.teardown(spaces.small()) is True
    assert fake.names() == {"maas-internal-ca"}  # the platform's CA outlives every space


def test_an_unreachable_api_is_transient():
    config = k8s.Configuration(host="http://127.0.0.1:9")
    config.retries = False
    client = KubernetesClient(k8s.ApiClient(config), timeout=2)
    with pytest.raises(KubernetesError) as info:
        client.get("v1", "ConfigMap", "maas", "x")
    assert info.value.transient
