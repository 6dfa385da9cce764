"""Bulk creation: an AddressList or a MessagingUserList POSTed to the collection creates every
item or, with one bad item, none (the 400 or 409 names the item and its field)."""
import pytest

from config_service.models import Address, MessagingUser
from eventlog.models import ConfigEvent
from tests.conftest import address_manifest, b64, space_manifest


@pytest.fixture
def space(tenant, clients):
    spaces = f"/api/v1/tenants/{tenant.slug}/addressspaces/"
    clients["owner"].post(spaces, space_manifest("bs"), format="json")
    return f"{spaces}bs/"


def address_list(*items) -> dict:
    return {"apiVersion": "enmasse.io/v1beta1", "kind": "AddressList", "items": list(items)}


def user(name: str, password: str = "s3cret-pw") -> dict:
    return {"apiVersion": "user.enmasse.io/v1beta1", "kind": "MessagingUser",
            "spec": {"username": name,
                     "authentication": {"type": "password", "password": b64(password)},
                     "authorization": [{"addresses": ["*"], "operations": ["send"]}]}}


def events(type_name: str) -> int:
    return ConfigEvent.objects.filter(type=type_name).count()


def test_an_address_list_creates_every_item(space, clients):
    answer = clients["admin"].post(space + "addresses/", address_list(
        address_manifest("bs", "dlq", "deadletter", "brokered-deadletter"),
        address_manifest("bs", "orders", deadletter="dlq"),
        address_manifest("bs", "news", "topic", "brokered-topic")), format="json")
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["kind"] == "AddressList" and body["metadata"]["totalItems"] == 3
    assert [i["metadata"]["name"] for i in body["items"]] == ["bs.dlq", "bs.orders", "bs.news"]
    assert body["items"][1]["spec"]["deadletter"] == "dlq"
    assert Address.objects.count() == 3


def test_an_enmasse_address_list_in_yaml_is_taken_as_it_is(space, clients):
    manifest = b"""apiVersion: enmasse.io/v1beta1
kind: AddressList
items:
- apiVersion: enmasse.io/v1beta1
  kind: Address
  metadata: {name: bs.a}
  spec: {address: a, type: queue, plan: brokered-queue}
- apiVersion: enmasse.io/v1beta1
  kind: Address
  metadata: {name: bs.b}
  spec: {address: b, type: queue, plan: brokered-queue}
"""
    answer = clients["admin"].post(space + "addresses/", manifest,
                                   content_type="application/yaml")
    assert answer.status_code == 201, answer.content
    assert sorted(Address.objects.values_list("name", flat=True)) == ["bs.a", "bs.b"]


@pytest.mark.parametrize("bad, status, field", [
    (address_manifest("bs", "y", plan="standard-small-queue"), 400, "items[1].spec.plan"),
    (address_manifest("bs", "a b"), 400, "items[1].spec.address"),
    (address_manifest("bs", "x"), 409, "items[1].spec.address"),  # the first item again
    ({**address_manifest("bs", "y"), "kind": "Queue"}, 400, "items[1].kind"),
    ("not an object", 400, "items[1].body"),
])
def test_one_bad_item_names_the_item_and_field_and_creates_nothing(space, clients, bad, status,
                                                                   field):
    answer = clients["admin"].post(space + "addresses/", address_list(
        address_manifest("bs", "x"), bad, address_manifest("bs", "z")), format="json")
    assert answer.status_code == status
    assert answer.json()["field"] == field
    assert answer.json()["message"].startswith("items[1]: ")
    assert not Address.objects.exists() and events("address.created") == 0


def test_an_empty_list_is_refused(space, clients):
    answer = clients["admin"].post(space + "addresses/", address_list(), format="json")
    assert answer.status_code == 400 and answer.json()["field"] == "items"


def test_a_list_of_users_creates_every_one_or_none(space, clients):
    url = space + "users/"
    bad = clients["admin"].post(url, {"kind": "MessagingUserList", "items": [
        user("app"), user("ops", password="short")]}, format="json")
    assert bad.status_code == 400
    assert bad.json()["field"] == "items[1].spec.authentication.password"
    assert not MessagingUser.objects.exists() and events("messaging_user.created") == 0
    answer = clients["admin"].post(url, {"kind": "MessagingUserList", "items": [
        user("app"), user("ops")]}, format="json")
    assert answer.status_code == 201, answer.content
    assert answer.json()["kind"] == "MessagingUserList"
    assert [i["spec"]["username"] for i in answer.json()["items"]] == ["app", "ops"]
    assert MessagingUser.objects.count() == 2


def test_lists_follow_the_roles_and_outsiders_get_404(space, clients):
    body = address_list(address_manifest("bs", "x"))
    assert clients["outsider"].post(space + "addresses/", body, format="json").status_code == 404
    assert clients["viewer"].post(space + "addresses/", body, format="json").status_code == 403
    users = {"kind": "MessagingUserList", "items": [user("app")]}
    assert clients["outsider"].post(space + "users/", users, format="json").status_code == 404
    assert clients["viewer"].post(space + "users/", users, format="json").status_code == 403
    assert not Address.objects.exists() and not MessagingUser.objects.exists()
