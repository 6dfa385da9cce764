"""An address space's `spec.connectors` through the API: EnMasse's shape normalised, every bad
field refused with a 400 naming it, the password and the client key write-only and sealed in the
database and the config log, refused where the routers cannot carry them (the embedded router,
brokered spaces) with the setting that makes them available, and an outsider who sees none of
it."""
import json

import pytest

from config_service.models import AddressSpace
from eventlog.models import ConfigEvent
from tests.certs import bundle
from tests.conftest import space_manifest
from tests.qdrouterd import fake_binary


def url(tenant, space=""):
    return f"/api/v1/tenants/{tenant.slug}/addressspaces/" + (f"{space}/" if space else "")


def connector(**over) -> dict:
    return {"name": "remote", "endpointHosts": [{"host": "amqp.example.com", "port": 5671}],
            "credentials": {"username": {"value": "app"}, "password": {"value": "s3cret-pw"}},
            "addresses": [{"name": "orders", "pattern": "orders/*"}], **over}


def with_connectors(name: str, connectors: list, type_: str = "standard") -> dict:
    manifest = space_manifest(name, type_)
    manifest["spec"]["connectors"] = connectors
    return manifest


@pytest.fixture
def on_qdrouterd(tmp_path, monkeypatch):
    """The platform runs qdrouterd (QDROUTERD names an executable)."""
    return fake_binary(tmp_path, monkeypatch)


def create(clients, tenant, name: str, connectors: list, type_: str = "standard"):
    return clients["owner"].post(url(tenant), with_connectors(name, connectors, type_),
                                 format="json")


def test_a_connector_is_kept_with_its_password_sealed_and_never_shown(tenant, clients,
                                                                      on_qdrouterd):
    response = create(clients, tenant, "bridge", [connector(idleTimeout=30, maxFrameSize=65536)])
    assert response.status_code == 201, response.content
    shown = response.json()["spec"]["connectors"]
    assert shown == [{"name": "remote",
                      "endpointHosts": [{"host": "amqp.example.com", "port": 5671}],
                      "credentials": {"username": {"value": "app"}},
                      "addresses": [{"name": "orders", "pattern": "orders/*"}],
                      "idleTimeout": 30, "maxFrameSize": 65536}]
    stored = AddressSpace.objects.get(name="bridge").spec
    assert "s3cret-pw" not in json.dumps(stored)
    assert stored["connectors"][0]["credentials"]["password"]["value"].startswith("sealed:")
    event = ConfigEvent.objects.get(type="address_space.created")
    assert "s3cret-pw" not in json.dumps(event.payload)
    # A PUT of what GET showed (no password) keeps the password and changes nothing.
    got = clients["owner"].get(url(tenant, "bridge")).json()
    put = clients["owner"].put(url(tenant, "bridge"), {"spec": got["spec"]}, format="json")
    assert put.status_code == 200, put.content
    assert ConfigEvent.objects.filter(type="address_space.spec_changed").count() == 0
    assert AddressSpace.objects.get(name="bridge").spec == stored


def test_a_client_key_is_sealed_and_a_ca_kept_as_pem(tenant, clients, on_qdrouterd):
    client = bundle("client.example")
    tls = {"caCert": {"value": client.ca}, "clientCert": {"value": client.chain},
           "clientKey": {"value": client.key}}
    response = create(clients, tenant, "tls", [connector(tls=tls)])
    assert response.status_code == 201, response.content
    shown = response.json()["spec"]["connectors"][0]["tls"]
    assert set(shown) == {"caCert", "clientCert"}
    assert shown["caCert"]["value"] == client.ca
    stored = json.dumps(AddressSpace.objects.get(name="tls").spec)
    assert client.key.splitlines()[1] not in stored


def test_a_changed_password_is_a_change(tenant, clients, on_qdrouterd):
    assert create(clients, tenant, "bridge", [connector()]).status_code == 201
    patched = connector(credentials={"username": {"value": "app"},
                                     "password": {"value": "another-pw"}})
    response = clients["owner"].patch(url(tenant, "bridge"), {"spec": {"connectors": [patched]}},
                                      format="json")
    assert response.status_code == 200, response.content
    assert ConfigEvent.objects.filter(type="address_space.spec_changed").count() == 1


@pytest.mark.parametrize("bad, field, says", [
    ({"name": "re-mote"}, "spec.connectors[0].name", "letters and digits"),
    ({"endpointHosts": []}, "spec.connectors[0].endpointHosts", "required"),
    ({"endpointHosts": [{"host": "bad host"}]}, "spec.connectors[0].endpointHosts[0].host",
     "DNS name"),
    ({"endpointHosts": [{"host": "h.example", "port": 70000}]},
     "spec.connectors[0].endpointHosts[0].port", "1 to 65535"),
    ({"addresses": []}, "spec.connectors[0].addresses", "required"),
    ({"addresses": [{"name": "a", "pattern": "x:/_local/$management"}]},
     "spec.connectors[0].addresses[0].pattern", "':/'"),
    ({"addresses": [{"name": "a", "pattern": "x"}, {"name": "a", "pattern": "y"}]},
     "spec.connectors[0].addresses[1].name", "twice"),
    ({"addresses": [{"name": "a", "pattern": "orders-*"}]},
     "spec.connectors[0].addresses[0].pattern", "whole tokens"),
    ({"idleTimeout": -1}, "spec.connectors[0].idleTimeout", "0 to 3600"),
    ({"maxFrameSize": 100}, "spec.connectors[0].maxFrameSize", "512"),
    ({"role": "inter-router"}, "spec.connectors[0].role", "route-container"),
    ({"credentials": {"username": {"value": "app"},
                      "password": {"valueFromSecret": {"name": "s", "key": "k"}}}},
     "spec.connectors[0].credentials.password.valueFromSecret", "Secret of the cluster"),
    ({"tls": {"caCert": {"value": "not a certificate"}}}, "spec.connectors[0].tls.caCert",
     "PEM"),
    ({"tls": {"clientCert": {"value": "CERT"}}}, "spec.connectors[0].tls.clientCert", "PEM"),
    ({"surprise": 1}, "spec.connectors[0]", "unknown keys"),
])
def test_a_bad_connector_is_refused_naming_its_field(tenant, clients, on_qdrouterd, bad, field,
                                                     says):
    response = create(clients, tenant, "bad", [connector(**bad)])
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["field"] == field, body
    assert says in body["message"], body


def test_a_client_key_must_be_the_certificates(tenant, clients, on_qdrouterd):
    one, other = bundle("client.example"), bundle("client.example")
    tls = {"clientCert": {"value": one.chain}, "clientKey": {"value": other.key}}
    response = create(clients, tenant, "bad", [connector(tls=tls)])
    assert response.status_code == 400
    assert response.json()["field"] == "spec.connectors[0].tls.clientKey"


def test_two_connectors_of_one_name_are_refused(tenant, clients, on_qdrouterd):
    response = create(clients, tenant, "bad", [connector(), connector()])
    assert response.status_code == 400
    assert response.json()["field"] == "spec.connectors[1].name"


def test_the_embedded_router_refuses_connectors_naming_the_setting(tenant, clients,
                                                                   monkeypatch):
    monkeypatch.delenv("QDROUTERD", raising=False)
    response = create(clients, tenant, "bridge", [connector()])
    assert response.status_code == 400
    body = response.json()
    assert body["field"] == "spec.connectors"
    assert "embedded router" in body["message"] and "QDROUTERD" in body["message"]
    # None asked is no refusal.
    assert create(clients, tenant, "plain", []).status_code == 201


def test_a_brokered_space_has_no_connectors(tenant, clients, on_qdrouterd):
    response = create(clients, tenant, "brk", [connector()], type_="brokered")
    assert response.status_code == 400
    assert response.json()["field"] == "spec.connectors"
    assert "standard" in response.json()["message"]


def test_an_outsider_sees_no_connector(tenant, clients, on_qdrouterd):
    assert create(clients, tenant, "bridge", [connector()]).status_code == 201
    assert clients["outsider"].get(url(tenant, "bridge")).status_code == 404
    patched = clients["outsider"].patch(url(tenant, "bridge"),
                                        {"spec": {"connectors": [connector(name="mine")]}},
                                        format="json")
    assert patched.status_code == 404


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "broker.localhost", "::1",
                                  "10.1.2.3", "192.168.0.7", "169.254.169.254", "0.0.0.0",
                                  "::ffff:127.0.0.1", "fd00::1"])
def test_a_connector_to_the_platforms_own_networks_is_refused(tenant, clients, on_qdrouterd,
                                                               host, settings):
    """The platform's router dials the connector: a host on loopback, a private or link-local
    network (a cloud's metadata endpoint) would let a tenant reach what only the platform
    may (this machine's brokers, the auth service)."""
    inside = [connector(endpointHosts=[{"host": host, "port": 5672}])]
    response = create(clients, tenant, "inside", inside)
    assert response.status_code == 400, response.content
    assert response.json()["field"] == "spec.connectors[0].endpointHosts[0].host"
    assert "MAAS_CONNECTOR_ALLOWED_NETWORKS" in response.json()["message"]
    assert not AddressSpace.objects.filter(name="inside").exists()
    # An operator may open networks of their own to connectors (localhost is 127.0.0.1).
    settings.MAAS_CONNECTOR_ALLOWED_NETWORKS = ["127.0.0.0/8", "10.0.0.0/8", "::1/128"]
    opened = create(clients, tenant, "opened", inside)
    opens = host in ("127.0.0.1", "localhost", "broker.localhost", "10.1.2.3", "::1",
                     "::ffff:127.0.0.1")
    assert opened.status_code == (201 if opens else 400), opened.content
