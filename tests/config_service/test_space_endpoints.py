"""An address space's `spec.endpoints` through the API: a host and a certificate per endpoint
(selfsigned, or the tenant's certBundle), every bad bundle refused with a 400 naming the field
and why, the key write-only and sealed in the database and the config log, a host no two spaces
share, and an outsider who sees none of it."""
import base64
import json

import pytest

from config_service.models import AddressSpace
from eventlog.models import ConfigEvent
from tests.certs import b64, bundle
from tests.conftest import space_manifest


def url(tenant, space=""):
    return f"/api/v1/tenants/{tenant.slug}/addressspaces/" + (f"{space}/" if space else "")


def with_endpoints(name: str, endpoints: list, type_: str = "brokered") -> dict:
    manifest = space_manifest(name, type_)
    manifest["spec"]["endpoints"] = endpoints
    return manifest


def create(clients, tenant, name: str, endpoints: list):
    return clients["owner"].post(url(tenant), with_endpoints(name, endpoints), format="json")


def test_a_selfsigned_endpoint_gets_a_default_host_and_its_own_ca(tenant, clients, settings):
    settings.MAAS_ENDPOINT_DOMAIN = "mq.example.net"
    response = create(clients, tenant, "shop", [{"name": "messaging", "service": "messaging"}])
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["spec"]["endpoints"] == [{
        "name": "messaging", "service": "messaging", "cert": {"provider": "selfsigned"},
        "expose": {"type": "route", "routeHost": f"messaging.shop.{tenant.slug}.mq.example.net"}}]
    ca = base64.b64decode(body["status"]["caCert"]).decode()
    other = create(clients, tenant, "shop2", [{"name": "messaging"}]).json()
    assert base64.b64decode(other["status"]["caCert"]).decode() != ca  # a CA per space
    messaging = next(e for e in body["status"]["endpointStatuses"] if e["name"] == "messaging")
    assert messaging["externalHost"] == f"messaging.shop.{tenant.slug}.mq.example.net"


def test_a_cert_bundle_is_kept_with_its_key_sealed_and_never_shown(tenant, clients):
    tenant_bundle = bundle("mq.acme.example")
    endpoint = {"name": "messaging", "service": "messaging", "cert": tenant_bundle.spec(),
                "expose": {"type": "loadbalancer", "routeHost": "mq.acme.example"}}
    response = create(clients, tenant, "shop", [endpoint])
    assert response.status_code == 201, response.content
    shown = response.json()["spec"]["endpoints"][0]["cert"]
    assert shown["provider"] == "certBundle" and "tlsKey" not in shown
    assert base64.b64decode(response.json()["status"]["caCert"]).decode() == tenant_bundle.ca
    # Neither the projection nor the config log holds the key in clear.
    key_body = tenant_bundle.key.splitlines()[1]
    stored = AddressSpace.objects.get(name="shop").spec
    assert key_body not in json.dumps(stored)
    assert stored["endpoints"][0]["cert"]["tlsKey"].startswith("sealed:")
    event = ConfigEvent.objects.get(type="address_space.created")
    assert key_body not in json.dumps(event.payload)
    # A PUT of what GET showed (no tlsKey) keeps the key and changes nothing.
    got = clients["owner"].get(url(tenant, "shop")).json()
    put = clients["owner"].put(url(tenant, "shop"), {"spec": got["spec"]}, format="json")
    assert put.status_code == 200, put.content
    assert ConfigEvent.objects.filter(type="address_space.spec_changed").count() == 0
    assert AddressSpace.objects.get(name="shop").spec == stored


@pytest.mark.parametrize("cert, field, says", [
    (lambda: bundle("mq.acme.example", days=10, ago=30).spec(), "tlsCert", "expired on"),
    (lambda: bundle("mq.acme.example", days=10, ago=-5).spec(), "tlsCert", "not valid before"),
    (lambda: bundle("other.example").spec(), "tlsCert", "not mq.acme.example"),
    (lambda: bundle("mq.acme.example", other_key=True).spec(), "tlsKey", "not the key"),
    (lambda: {**bundle("mq.acme.example").spec(), "tlsCert": "not base64!"}, "tlsCert",
     "base64"),
    (lambda: {**bundle("mq.acme.example").spec(), "tlsCert": b64("no pem here")}, "tlsCert",
     "PEM certificate chain"),
    (lambda: {**bundle("mq.acme.example").spec(), "tlsKey": b64("no key")}, "tlsKey",
     "private key"),
    (lambda: {"provider": "certBundle", "tlsKey": bundle("mq.acme.example").spec()["tlsKey"]},
     "tlsCert", "required"),
    (lambda: {"provider": "wildcard"}, "provider", "no cluster wildcard"),
    (lambda: {"provider": "selfsigned", "tlsCert": b64("x")}, "tlsCert", "certBundle"),
])
def test_a_bad_bundle_is_refused_with_the_field_and_why(tenant, clients, cert, field, says):
    endpoint = {"name": "messaging", "cert": cert(), "expose": {"routeHost": "mq.acme.example"}}
    response = create(clients, tenant, "shop", [endpoint])
    assert response.status_code == 400, response.content
    error = response.json()
    assert f"spec.endpoints[0].cert.{field}" in json.dumps(error), error
    assert says in json.dumps(error), error
    assert not AddressSpace.objects.filter(name="shop").exists()


def test_a_bundle_near_its_end_is_said_in_the_status(tenant, clients):
    near = bundle("mq.acme.example", days=11)  # made a day ago: 10 days left
    endpoint = {"name": "messaging", "cert": near.spec(),
                "expose": {"routeHost": "mq.acme.example"}}
    response = create(clients, tenant, "shop", [endpoint])
    assert response.status_code == 201, response.content
    messages = response.json()["status"]["messages"]
    assert any("Endpoint messaging: its certificate expires on" in m and "(in 9 days)" in m
               for m in messages), messages
    fresh = create(clients, tenant, "fresh", [{**endpoint, "cert": bundle(
        "mq2.acme.example").spec(), "expose": {"routeHost": "mq2.acme.example"}}])
    assert not any("expires" in m for m in fresh.json()["status"]["messages"])


def test_a_wildcard_bundle_covers_one_label(tenant, clients):
    wild = bundle("*.acme.example")
    ok = {"name": "messaging", "cert": wild.spec(), "expose": {"routeHost": "mq.acme.example"}}
    assert create(clients, tenant, "a", [ok]).status_code == 201
    deep = {**ok, "expose": {"routeHost": "x.mq.acme.example"}}
    assert create(clients, tenant, "b", [deep]).status_code == 400


@pytest.mark.parametrize("endpoints, field", [
    ([{"name": "Messaging"}], "spec.endpoints[0].name"),
    ([{"name": "messaging", "service": "console"}], "spec.endpoints[0].service"),
    ([{"name": "messaging", "expose": {"type": "ingress"}}], "spec.endpoints[0].expose.type"),
    ([{"name": "messaging", "expose": {"routeHost": "127.0.0.1"}}],
     "spec.endpoints[0].expose.routeHost"),
    ([{"name": "messaging", "exports": []}], "spec.endpoints[0]"),
    ([{"name": "m", "service": "messaging"}, {"name": "m", "service": "mqtt"}],
     "spec.endpoints[1].name"),
    ("messaging", "spec.endpoints"),
])
def test_a_bad_endpoint_is_refused_with_its_field(tenant, clients, endpoints, field):
    response = create(clients, tenant, "shop", endpoints)
    assert response.status_code == 400, response.content
    assert field in json.dumps(response.json())


def test_a_host_is_one_space_s_even_across_tenants(tenant, clients, outsider):
    endpoint = [{"name": "messaging", "expose": {"routeHost": "mq.shared.example"}}]
    assert create(clients, tenant, "shop", endpoint).status_code == 201
    outsider_tenant = outsider.memberships.first().tenant
    response = clients["outsider"].post(url(outsider_tenant), with_endpoints("theirs", endpoint),
                                        format="json")
    assert response.status_code == 400
    assert "spec.endpoints[0].expose.routeHost" in json.dumps(response.json())


def test_an_outsider_sees_no_endpoint_and_only_the_owner_changes_one(tenant, clients):
    assert create(clients, tenant, "shop", [{"name": "messaging"}]).status_code == 201
    assert clients["outsider"].get(url(tenant, "shop")).status_code == 404
    patch = {"spec": {"endpoints": [{"name": "messaging",
                                     "expose": {"routeHost": "mine.example"}}]}}
    for role in ("viewer", "admin"):  # the spec is the owner's, as the plan
        assert clients[role].patch(url(tenant, "shop"), patch, format="json").status_code == 403
    assert clients["outsider"].patch(url(tenant, "shop"), patch, format="json").status_code == 404
    response = clients["owner"].patch(url(tenant, "shop"), patch, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["spec"]["endpoints"][0]["expose"]["routeHost"] == "mine.example"


def test_endpoints_stored_in_any_shape_before_are_replaced_cleanly(tenant, clients):
    """A space from before MaaS took `endpoints` may hold anything under the key (EnMasse's as
    given): a new spec replaces it with a 200, never a 500."""
    from tests.config_service.legacy import legacy_space

    legacy_space(tenant, "old")
    AddressSpace.objects.filter(name="old").update(spec={"endpoints": [
        {"name": "messaging", "cert": "not an object"}, {"name": ["not", "a", "name"]}, 7]})
    new = [{"name": "messaging", "cert": bundle("mq.old.example").spec(),
            "expose": {"routeHost": "mq.old.example"}}]
    response = clients["owner"].patch(url(tenant, "old"), {"spec": {"endpoints": new}},
                                      format="json")
    assert response.status_code == 200, response.content
    assert response.json()["spec"]["endpoints"][0]["cert"]["provider"] == "certBundle"
