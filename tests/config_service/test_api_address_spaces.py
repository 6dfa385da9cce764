"""The address space endpoints: create, read, change plan, delete, for every role."""
import pytest
import yaml

from config_service.models import AddressSpace
from eventlog.models import ConfigEvent
from tests import broker
from tests.conftest import space_manifest


def url(tenant, space=""):
    return f"/api/v1/tenants/{tenant.slug}/addressspaces/" + (f"{space}/" if space else "")


def test_owner_creates_a_space_and_gets_the_enmasse_shape(tenant, clients):
    response = clients["owner"].post(url(tenant), space_manifest("orders"), format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["kind"] == "AddressSpace"
    assert body["metadata"]["name"] == "orders"
    assert body["metadata"]["resourceVersion"] == "1"
    assert body["spec"] == {"type": "brokered", "plan": "brokered-single-broker"}
    assert body["status"]["phase"] == "Configuring"
    assert body["status"]["isReady"] is False
    ports = body["status"]["endpointStatuses"][0]["servicePorts"]
    assert ports == [{"name": "amqp", "port": broker.AMQP_PORT}]
    event = ConfigEvent.objects.get(type="address_space.created")
    assert event.sequence == 1 and event.actor == "token:default:olivia"


def test_an_enmasse_yaml_manifest_is_accepted_as_it_is(tenant, clients):
    manifest = yaml.safe_dump(space_manifest("yamlspace", "standard", "standard-small"))
    response = clients["admin"].post(url(tenant), manifest, content_type="application/yaml")
    assert response.status_code == 201, response.content
    assert response.json()["spec"]["plan"] == "standard-small"


def test_the_viewer_reads_but_cannot_create(tenant, clients):
    clients["owner"].post(url(tenant), space_manifest("orders"), format="json")
    assert clients["viewer"].get(url(tenant, "orders")).status_code == 200
    response = clients["viewer"].post(url(tenant), space_manifest("mine"), format="json")
    assert response.status_code == 403
    assert not AddressSpace.objects.filter(name="mine").exists()


def test_it_hides_the_tenant_from_an_outsider(tenant, clients):
    clients["owner"].post(url(tenant), space_manifest("orders"), format="json")
    assert clients["outsider"].get(url(tenant)).status_code == 404
    assert clients["outsider"].get(url(tenant, "orders")).status_code == 404
    response = clients["outsider"].post(url(tenant), space_manifest("x"), format="json")
    assert response.status_code == 404
    assert clients["outsider"].delete(url(tenant, "orders")).status_code == 404
    assert AddressSpace.objects.get(name="orders").terminating is False


def test_anonymous_is_refused(tenant, clients):
    assert clients["anonymous"].get(url(tenant)).status_code == 401


@pytest.mark.parametrize("change, field", [
    ({"metadata": {"name": "Bad_Name"}}, "metadata.name"),
    ({"spec": {"type": "fancy", "plan": "standard-small"}}, "spec.type"),
    ({"spec": {"type": "brokered", "plan": "no-such-plan"}}, "spec.plan"),
    ({"spec": {"type": "brokered", "plan": "standard-small"}}, "spec.plan"),
    ({"kind": "Address"}, "kind"),
])
def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(tenant, clients, change, field):
    manifest = space_manifest("good") | change
    response = clients["owner"].post(url(tenant), manifest, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field
    assert AddressSpace.objects.count() == 0


def test_a_duplicate_name_is_a_conflict(tenant, clients):
    clients["owner"].post(url(tenant), space_manifest("orders"), format="json")
    response = clients["owner"].post(url(tenant), space_manifest("orders"), format="json")
    assert response.status_code == 409


def test_only_the_owner_changes_the_plan_and_a_stale_version_is_409(tenant, clients):
    clients["owner"].post(url(tenant), space_manifest("s1", "standard"), format="json")
    change = {"metadata": {"resourceVersion": "1"},
              "spec": {"type": "standard", "plan": "standard-medium"}}
    assert clients["admin"].put(url(tenant, "s1"), change, format="json").status_code == 403
    response = clients["owner"].put(url(tenant, "s1"), change, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["spec"]["plan"] == "standard-medium"
    assert response.json()["metadata"]["resourceVersion"] == "2"
    stale = clients["owner"].put(url(tenant, "s1"), {**change, "spec": {
        "type": "standard", "plan": "standard-small"}}, format="json")
    assert stale.status_code == 409
    assert AddressSpace.objects.get(name="s1").plan == "standard-medium"


def test_delete_marks_the_space_terminating(tenant, clients):
    clients["owner"].post(url(tenant), space_manifest("orders"), format="json")
    response = clients["admin"].delete(url(tenant, "orders"))
    assert response.status_code == 202
    assert response.json()["status"]["phase"] == "Terminating"
    again = clients["owner"].post(url(tenant), space_manifest("orders"), format="json")
    assert again.status_code == 409


def test_list_pages_and_filters_by_type(tenant, clients):
    for i in range(3):
        clients["owner"].post(url(tenant), space_manifest(f"b{i}"), format="json")
    clients["owner"].post(url(tenant), space_manifest("s0", "standard"), format="json")
    page = clients["viewer"].get(url(tenant) + "?limit=2").json()
    assert page["kind"] == "AddressSpaceList"
    assert page["metadata"]["totalItems"] == 4
    assert [i["metadata"]["name"] for i in page["items"]] == ["b0", "b1"]
    standard = clients["viewer"].get(url(tenant) + "?type=standard").json()
    assert [i["metadata"]["name"] for i in standard["items"]] == ["s0"]
    configuring = clients["viewer"].get(url(tenant) + "?phase=Configuring").json()
    assert configuring["metadata"]["totalItems"] == 4
    assert clients["viewer"].get(url(tenant) + "?phase=Bogus").status_code == 400


def test_the_tenant_quota_caps_the_number_of_spaces(tenant, clients):
    tenant.quota.max_address_spaces = 1
    tenant.quota.save()
    assert clients["owner"].post(url(tenant), space_manifest("a"), format="json").status_code == 201
    response = clients["owner"].post(url(tenant), space_manifest("b"), format="json")
    assert response.status_code == 403
    assert response.json()["code"] == "quota_exceeded"
