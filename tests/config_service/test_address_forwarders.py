"""An address's `spec.forwarders` through the API: EnMasse's shape kept, every bad field
refused with a 400 naming it, a remoteAddress only through a connector of the address's own
space, refused where the space cannot have connectors (the embedded router, brokered spaces),
and valid forwarders refused as not available yet (nothing moves their messages)."""
import pytest

from tenants.models import Tenant
from tests.conftest import address_manifest, space_manifest
from tests.qdrouterd import fake_binary


def spaces(tenant):
    return f"/api/v1/tenants/{tenant.slug}/addressspaces/"


def addresses(tenant, space="bridge"):
    return f"{spaces(tenant)}{space}/addresses/"


def connector(name="remote") -> dict:
    return {"name": name, "endpointHosts": [{"host": "amqp.example.com", "port": 5671}],
            "addresses": [{"name": "orders", "pattern": "orders/*"}]}


def forwarder(**over) -> dict:
    return {"name": "fwd", "remoteAddress": "remote/orders/eu", "direction": "out", **over}


def queue(forwarders, space="bridge", address="q", type_="queue", **spec) -> dict:
    plan = f"standard-small-{type_}"
    return address_manifest(space, address, type_, plan, forwarders=forwarders, **spec)


@pytest.fixture
def on_qdrouterd(tmp_path, monkeypatch):
    """The platform runs qdrouterd (QDROUTERD names an executable)."""
    return fake_binary(tmp_path, monkeypatch)


@pytest.fixture
def bridge(tenant, clients, on_qdrouterd):
    """A standard space with one connector, `remote`."""
    manifest = space_manifest("bridge", "standard")
    manifest["spec"]["connectors"] = [connector()]
    response = clients["owner"].post(spaces(tenant), manifest, format="json")
    assert response.status_code == 201, response.content
    return addresses(tenant)


def not_realised(response) -> bool:
    """The refusal of valid forwarders: nothing moves their messages yet."""
    return (response.status_code == 400 and response.json()["field"] == "spec.forwarders"
            and "not available yet" in response.json()["message"])


def test_valid_forwarders_are_refused_as_not_available_yet_and_change_nothing(
        tenant, clients, bridge):
    fwds = [forwarder(priority=5), forwarder(name="back", direction="in")]
    assert not_realised(clients["owner"].post(bridge, queue(fwds), format="json"))
    assert clients["owner"].get(f"{bridge}bridge.q/").status_code == 404
    # A PATCH is validated as a create is, and refused alike.
    assert clients["owner"].post(bridge, queue([]), format="json").status_code == 201
    patch = clients["owner"].patch(f"{bridge}bridge.q/", {"spec": {"forwarders": [
        forwarder(remoteAddress="elsewhere/x")]}}, format="json")
    assert patch.status_code == 400
    assert patch.json()["field"] == "spec.forwarders[0].remoteAddress"
    assert not_realised(clients["owner"].patch(f"{bridge}bridge.q/", {"spec": {"forwarders": [
        forwarder(name="only", direction="in")]}}, format="json"))
    body = clients["owner"].get(f"{bridge}bridge.q/").json()
    assert "forwarders" not in body["spec"] and "forwarders" not in body["status"]


def test_a_subscription_forwards_out_only(tenant, clients, bridge):
    post = clients["owner"].post
    assert post(bridge, address_manifest("bridge", "t", "topic", "standard-small-topic"),
                format="json").status_code == 201
    sub = queue([forwarder(direction="in")], address="s", type_="subscription", topic="t")
    response = post(bridge, sub, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == "spec.forwarders[0].direction"
    assert "out" in response.json()["message"]
    sub["spec"]["forwarders"] = [forwarder()]
    assert not_realised(post(bridge, sub, format="json")), "out is a subscription's"


@pytest.mark.parametrize("bad,field,says", [
    ({"remoteAddress": "orders"}, "spec.forwarders[0].remoteAddress", "<connector>/<address>"),
    ({"remoteAddress": "remote/"}, "spec.forwarders[0].remoteAddress", "<connector>/<address>"),
    ({"remoteAddress": "other/orders"}, "spec.forwarders[0].remoteAddress",
     "no connector 'other'"),
    ({"remoteAddress": 7}, "spec.forwarders[0].remoteAddress", "<connector>/<address>"),
    ({"direction": "both"}, "spec.forwarders[0].direction", "in or out"),
    ({"direction": None}, "spec.forwarders[0].direction", "in or out"),
    ({"name": "a-b"}, "spec.forwarders[0].name", "letters or digits"),
    ({"priority": "high"}, "spec.forwarders[0].priority", "integer"),
    ({"priority": True}, "spec.forwarders[0].priority", "integer"),
    ({"priority": 2**40}, "spec.forwarders[0].priority", "integer"),
    ({"surprise": 1}, "spec.forwarders[0].surprise", "not a forwarder field"),
])
def test_a_bad_forwarder_is_refused_naming_its_field(tenant, clients, bridge, bad, field,
                                                     says):
    response = clients["owner"].post(bridge, queue([forwarder(**bad)]), format="json")
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field, response.json()
    assert says in response.json()["message"], response.json()


def test_forwarders_of_one_name_and_of_other_types_are_refused(tenant, clients, bridge):
    post = clients["owner"].post
    response = post(bridge, queue([forwarder(), forwarder(direction="in")]), format="json")
    assert response.status_code == 400
    assert response.json()["field"] == "spec.forwarders[1].name"
    response = post(bridge, queue("fwd"), format="json")
    assert response.status_code == 400 and response.json()["field"] == "spec.forwarders"
    topic = address_manifest("bridge", "t", "topic", "standard-small-topic",
                             forwarders=[forwarder()])
    response = post(bridge, topic, format="json")
    assert response.status_code == 400 and response.json()["field"] == "spec.forwarders"
    assert "queues and subscriptions" in response.json()["message"]


def test_a_space_without_connectors_refuses_forwarders_naming_why(tenant, clients, monkeypatch,
                                                                  on_qdrouterd):
    post = clients["owner"].post
    assert post(spaces(tenant), space_manifest("plain", "standard"),
                format="json").status_code == 201
    response = post(addresses(tenant, "plain"), queue([forwarder()], space="plain"),
                    format="json")
    assert response.status_code == 400
    assert response.json()["field"] == "spec.forwarders[0].remoteAddress"
    assert "connectors: none" in response.json()["message"]
    assert post(spaces(tenant), space_manifest("brk"), format="json").status_code == 201
    brokered = address_manifest("brk", "q", forwarders=[forwarder()])
    response = post(addresses(tenant, "brk"), brokered, format="json")
    assert response.status_code == 400 and response.json()["field"] == "spec.forwarders"
    assert "standard" in response.json()["message"]
    monkeypatch.delenv("QDROUTERD", raising=False)
    response = post(addresses(tenant, "plain"), queue([forwarder()], space="plain",
                                                      address="q2"), format="json")
    assert response.status_code == 400 and response.json()["field"] == "spec.forwarders"
    assert "embedded router" in response.json()["message"]
    # None asked is no refusal.
    assert post(addresses(tenant, "plain"), queue([], space="plain", address="q3"),
                format="json").status_code == 201


def test_an_outsider_cannot_use_another_spaces_connector(tenant, clients, bridge, outsider):
    # Not through the space: it is not theirs to see.
    response = clients["outsider"].post(bridge, queue([forwarder()]), format="json")
    assert response.status_code == 404
    # Nor from a space of their own: a remoteAddress names a connector of the address's space.
    own = Tenant.objects.get(memberships__user=outsider)
    assert clients["outsider"].post(spaces(own), space_manifest("mine", "standard"),
                                    format="json").status_code == 201
    response = clients["outsider"].post(addresses(own, "mine"), queue([forwarder()],
                                                                       space="mine"),
                                        format="json")
    assert response.status_code == 400
    assert response.json()["field"] == "spec.forwarders[0].remoteAddress"
