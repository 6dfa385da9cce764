"""The address endpoints: create, validate, quota, plan change, delete, list, for every role."""
import pytest

from config_service.models import Address
from eventlog.models import ConfigEvent
from tests.conftest import address_manifest, space_manifest


@pytest.fixture
def brokered(tenant, clients):
    clients["owner"].post(f"/api/v1/tenants/{tenant.slug}/addressspaces/",
                          space_manifest("bs"), format="json")
    return f"/api/v1/tenants/{tenant.slug}/addressspaces/bs/addresses/"


@pytest.fixture
def standard(tenant, clients):
    clients["owner"].post(f"/api/v1/tenants/{tenant.slug}/addressspaces/",
                          space_manifest("ss", "standard", "standard-small"), format="json")
    return f"/api/v1/tenants/{tenant.slug}/addressspaces/ss/addresses/"


def test_admin_creates_a_queue(brokered, clients):
    response = clients["admin"].post(brokered, address_manifest("bs", "orders"), format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["metadata"]["name"] == "bs.orders"
    assert body["spec"] == {"address": "orders", "type": "queue", "plan": "brokered-queue"}
    assert body["status"]["phase"] == "Configuring"
    assert body["status"]["brokerStatuses"][0]["clusterId"] == "broker"


def test_the_name_is_derived_when_missing(brokered, clients):
    manifest = address_manifest("bs", "Orders/EU")
    del manifest["metadata"]
    response = clients["admin"].post(brokered, manifest, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["metadata"]["name"] == "bs.orders-eu"


def test_viewer_cannot_create_and_outsider_cannot_see(brokered, clients):
    clients["owner"].post(brokered, address_manifest("bs", "orders"), format="json")
    assert clients["viewer"].post(brokered, address_manifest("bs", "x"),
                                  format="json").status_code == 403
    assert clients["viewer"].get(brokered + "bs.orders/").status_code == 200
    assert clients["outsider"].get(brokered).status_code == 404
    assert clients["outsider"].get(brokered + "bs.orders/").status_code == 404
    assert clients["outsider"].delete(brokered + "bs.orders/").status_code == 404
    assert Address.objects.filter(name="bs.orders").exists()


@pytest.mark.parametrize("manifest, field", [
    (address_manifest("bs", "a b"), "spec.address"),
    (address_manifest("bs", "x", "anycast", "standard-small-anycast"), "spec.type"),
    (address_manifest("bs", "x", "queue", "standard-small-queue"), "spec.plan"),
    (address_manifest("bs", "x", "queue", "brokered-topic"), "spec.plan"),
    (address_manifest("bs", "x", deadletter="nope"), "spec.deadletter"),
    (address_manifest("bs", "x", messageTtl={"maximum": -1}), "spec.messageTtl.maximum"),
    ({"metadata": {"name": "other.x"}, "spec": {"address": "x", "type": "queue",
                                                "plan": "brokered-queue"}}, "metadata.name"),
])
def test_bad_input_is_a_400_naming_the_field(brokered, clients, manifest, field):
    response = clients["owner"].post(brokered, manifest, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field
    assert not Address.objects.exists()


def test_a_duplicate_address_names_the_existing_resource(brokered, clients):
    clients["owner"].post(brokered, address_manifest("bs", "orders"), format="json")
    manifest = address_manifest("bs", "orders")
    manifest["metadata"]["name"] = "bs.again"
    response = clients["owner"].post(brokered, manifest, format="json")
    assert response.status_code == 409
    assert "bs.orders" in response.json()["message"]


def test_references_must_exist_and_have_the_right_type(standard, clients):
    post = clients["owner"].post
    assert post(standard, address_manifest("ss", "dlq", "deadletter", "standard-deadletter"),
                format="json").status_code == 201
    assert post(standard, address_manifest("ss", "q", "queue", "standard-small-queue",
                                           deadletter="dlq", expiry="dlq"),
                format="json").status_code == 201
    assert post(standard, address_manifest("ss", "t", "topic", "standard-small-topic"),
                format="json").status_code == 201
    sub = address_manifest("ss", "s", "subscription", "standard-small-subscription", topic="q")
    response = post(standard, sub, format="json")
    assert response.status_code == 400 and response.json()["field"] == "spec.topic"
    sub["spec"]["topic"] = "t"
    assert post(standard, sub, format="json").status_code == 201
    in_use = clients["owner"].delete(standard + "ss.dlq/")
    assert in_use.status_code == 409


def test_over_the_plan_credits_an_address_stays_pending_with_quota_exceeded(standard, clients):
    post = clients["owner"].post
    # standard-small: router 1, broker 1, aggregate 2; a large queue takes a whole broker.
    first = post(standard, address_manifest("ss", "big", "queue", "standard-large-queue"),
                 format="json")
    assert first.json()["status"]["phase"] == "Configuring"
    second = post(standard, address_manifest("ss", "big2", "queue", "standard-large-queue"),
                  format="json")
    assert second.status_code == 201
    assert second.json()["status"]["phase"] == "Pending"
    assert second.json()["status"]["messages"] == ["Quota exceeded"]
    pending = clients["viewer"].get(standard + "?phase=Pending").json()
    assert [i["metadata"]["name"] for i in pending["items"]] == ["ss.big2"]
    # Freeing the credits schedules the pending address.
    assert clients["owner"].delete(standard + "ss.big/").status_code == 204
    now = clients["viewer"].get(standard + "ss.big2/").json()
    assert now["status"]["phase"] == "Configuring"
    assert ConfigEvent.objects.filter(type="address.scheduled").count() == 1


def test_a_plan_change_that_does_not_fit_is_refused_and_changes_nothing(standard, clients):
    post = clients["owner"].post
    post(standard, address_manifest("ss", "a", "queue", "standard-medium-queue"), format="json")
    post(standard, address_manifest("ss", "b", "queue", "standard-small-queue"), format="json")
    change = {"spec": {"plan": "standard-xlarge-queue"}}
    response = clients["owner"].patch(standard + "ss.b/", change, format="json")
    assert response.status_code == 403
    assert Address.objects.get(name="ss.b").plan == "standard-small-queue"


def test_a_plan_change_that_fits_is_recorded(standard, clients):
    clients["owner"].post(standard, address_manifest("ss", "b", "queue", "standard-small-queue"),
                          format="json")
    response = clients["admin"].patch(
        standard + "ss.b/", {"metadata": {"resourceVersion": "2"},
                             "spec": {"plan": "standard-medium-queue"}}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["spec"]["plan"] == "standard-medium-queue"
    assert ConfigEvent.objects.filter(type="address.plan_changed").count() == 1
    stale = clients["admin"].patch(standard + "ss.b/", {"metadata": {"resourceVersion": "2"},
                                                        "spec": {"plan": "standard-small-queue"}},
                                   format="json")
    assert stale.status_code == 409


def test_the_list_pages_filters_and_searches(brokered, clients):
    for name in ("a1", "a2", "b1"):
        clients["owner"].post(brokered, address_manifest("bs", name), format="json")
    clients["owner"].post(brokered, address_manifest("bs", "t1", "topic", "brokered-topic"),
                          format="json")
    page = clients["viewer"].get(brokered + "?limit=2&offset=1").json()
    assert page["metadata"]["totalItems"] == 4
    assert [i["spec"]["address"] for i in page["items"]] == ["a2", "b1"]
    topics = clients["viewer"].get(brokered + "?type=topic").json()
    assert [i["spec"]["address"] for i in topics["items"]] == ["t1"]
    search = clients["viewer"].get(brokered + "?search=a").json()
    assert search["metadata"]["totalItems"] == 2


def test_the_events_endpoint_shows_only_the_tenants_own_log(tenant, brokered, clients):
    clients["owner"].post(brokered, address_manifest("bs", "orders"), format="json")
    events = clients["viewer"].get(f"/api/v1/tenants/{tenant.slug}/events/").json()["items"]
    types = [e["type"] for e in events]
    assert "address.created" in types and "tenant.created" in types
    assert all(e["stream"] != "" for e in events)
    outsider = clients["outsider"].get(f"/api/v1/tenants/{tenant.slug}/events/")
    assert outsider.status_code == 404
