"""PUT replaces a spec (optional fields left out return to their defaults), PATCH merges a JSON
merge patch (RFC 7386) into it; both check resourceVersion, for address spaces, addresses and
messaging users alike."""
import pytest

from config_service.models import Address, AddressSpace, MessagingUser
from eventlog.models import ConfigEvent
from tests.config_service.legacy import legacy_space
from tests.conftest import address_manifest, b64, client_for, make_user, space_manifest


@pytest.fixture
def spaces(tenant):
    return f"/api/v1/tenants/{tenant.slug}/addressspaces/"


@pytest.fixture
def addresses(spaces, clients):
    clients["owner"].post(spaces, space_manifest("bs"), format="json")
    url = f"{spaces}bs/addresses/"
    clients["owner"].post(url, address_manifest("bs", "dlq", "deadletter", "brokered-deadletter"),
                          format="json")
    answer = clients["owner"].post(url, address_manifest(
        "bs", "orders", deadletter="dlq", expiry="dlq",
        messageTtl={"maximum": 60000},
        messageRedelivery={"maximumDeliveryAttempts": 3}), format="json")
    assert answer.status_code == 201, answer.content
    return url


@pytest.fixture
def users(spaces, clients):
    clients["owner"].post(spaces, space_manifest("us"), format="json")
    url = f"{spaces}us/users/"
    answer = clients["owner"].post(url, {"spec": {
        "username": "app", "authentication": {"type": "password", "password": b64("s3cret-pw")},
        "authorization": [{"addresses": ["orders"], "operations": ["send", "recv"]}]}},
        format="json")
    assert answer.status_code == 201, answer.content
    return url


# Address spaces ---------------------------------------------------------------------------------

def _legacy_space(tenant, spaces) -> str:
    legacy_space(tenant, "old")
    return f"{spaces}old/"


def test_put_of_a_space_drops_the_spec_keys_it_leaves_out(tenant, spaces, clients):
    url = _legacy_space(tenant, spaces)
    answer = clients["owner"].put(url, {"spec": {"type": "standard", "plan": "standard-small"}},
                                  format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["spec"] == {"type": "standard", "plan": "standard-small"}
    assert AddressSpace.objects.get(name="old").spec == {}
    event = ConfigEvent.objects.get(type="address_space.spec_changed")
    assert event.payload["spec"] == {} and event.payload["plan"] == "standard-small"


def test_patch_of_a_space_merges_and_null_removes(tenant, spaces, clients):
    url = _legacy_space(tenant, spaces)
    answer = clients["owner"].patch(url, {"spec": {"plan": "standard-medium"}}, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["spec"]["plan"] == "standard-medium"
    assert set(AddressSpace.objects.get(name="old").spec) == {"endpoints",
                                                              "authenticationService"}
    answer = clients["owner"].patch(url, {"spec": {"endpoints": None}}, format="json")
    assert answer.status_code == 200, answer.content
    assert AddressSpace.objects.get(name="old").spec == {
        "authenticationService": {"name": "standard-authservice"}}
    # Nothing new of EnMasse's may be added, by PUT or PATCH.
    refused = clients["owner"].patch(url, {"spec": {"networkPolicy": {}}}, format="json")
    assert refused.status_code == 400 and refused.json()["field"] == "spec.networkPolicy"


def test_put_of_a_space_needs_the_plan_and_checks_the_version(spaces, clients):
    clients["owner"].post(spaces, space_manifest("s1", "standard"), format="json")
    missing = clients["owner"].put(f"{spaces}s1/", {"spec": {"type": "standard"}}, format="json")
    assert missing.status_code == 400 and missing.json()["field"] == "spec.plan"
    stale = clients["owner"].patch(f"{spaces}s1/", {"metadata": {"resourceVersion": "7"},
                                                    "spec": {"plan": "standard-medium"}},
                                   format="json")
    assert stale.status_code == 409
    assert clients["outsider"].patch(f"{spaces}s1/", {"spec": {"plan": "standard-medium"}},
                                     format="json").status_code == 404
    assert AddressSpace.objects.get(name="s1").plan == "standard-small"


# Addresses --------------------------------------------------------------------------------------

def test_put_of_an_address_returns_left_out_fields_to_their_defaults(addresses, clients):
    answer = clients["admin"].put(addresses + "bs.orders/", {"spec": {
        "address": "orders", "type": "queue", "plan": "brokered-queue"}}, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["spec"] == {"address": "orders", "type": "queue",
                                     "plan": "brokered-queue"}
    orders = Address.objects.get(name="bs.orders")
    assert (orders.deadletter, orders.expiry, orders.spec) == ("", "", {})


def test_patch_of_an_address_merges_nested_fields_and_null_removes(addresses, clients):
    answer = clients["admin"].patch(addresses + "bs.orders/", {"spec": {
        "messageTtl": {"maximum": 5000}, "expiry": None}}, format="json")
    assert answer.status_code == 200, answer.content
    spec = answer.json()["spec"]
    assert spec["messageTtl"] == {"maximum": 5000}
    assert spec["messageRedelivery"] == {"maximumDeliveryAttempts": 3}
    assert spec["deadletter"] == "dlq" and "expiry" not in spec
    answer = clients["admin"].patch(addresses + "bs.orders/", b'{"spec": {"messageTtl": null}}',
                                    content_type="application/merge-patch+json")
    assert answer.status_code == 200, answer.content
    assert "messageTtl" not in answer.json()["spec"]
    assert Address.objects.get(name="bs.orders").deadletter == "dlq"


def test_put_of_an_address_needs_the_plan_checks_the_version_and_hides_from_outsiders(
        addresses, clients):
    missing = clients["admin"].put(addresses + "bs.orders/", {"spec": {"address": "orders"}},
                                   format="json")
    assert missing.status_code == 400 and missing.json()["field"] == "spec.plan"
    stale = clients["admin"].put(addresses + "bs.orders/", {
        "metadata": {"resourceVersion": "1"},
        "spec": {"address": "orders", "type": "queue", "plan": "brokered-queue"}},
        format="json")
    assert stale.status_code == 409
    assert clients["outsider"].put(addresses + "bs.orders/", {"spec": {
        "plan": "brokered-queue"}}, format="json").status_code == 404
    assert clients["viewer"].patch(addresses + "bs.orders/", {"spec": {"expiry": None}},
                                   format="json").status_code == 403
    assert Address.objects.get(name="bs.orders").expiry == "dlq"


# Messaging users --------------------------------------------------------------------------------

def test_put_of_a_user_drops_rules_left_out_and_keeps_the_password(users, clients):
    before = MessagingUser.objects.get(username="app").password_hash
    answer = clients["admin"].put(users + "us.app/", {"spec": {"username": "app"}},
                                  format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["spec"]["authorization"] == []
    user = MessagingUser.objects.get(username="app")
    assert user.authorization == [] and user.password_hash == before


def test_patch_of_a_user_replaces_the_rules_list_or_just_the_password(users, clients):
    before = MessagingUser.objects.get(username="app").password_hash
    rules = [{"addresses": ["invoices"], "operations": ["recv"]}]
    answer = clients["admin"].patch(users + "us.app/", {"spec": {"authorization": rules}},
                                    format="json")
    assert answer.status_code == 200, answer.content
    assert MessagingUser.objects.get(username="app").authorization == rules
    assert MessagingUser.objects.get(username="app").password_hash == before
    answer = clients["admin"].patch(users + "us.app/", {"spec": {"authentication": {
        "password": b64("an0ther-pw")}}}, format="json")
    assert answer.status_code == 200, answer.content
    user = MessagingUser.objects.get(username="app")
    assert user.password_hash != before and user.authorization == rules


def test_a_stale_user_version_is_409_and_outsiders_get_404(users, clients):
    stale = clients["admin"].patch(users + "us.app/", {"metadata": {"resourceVersion": "1"},
                                                       "spec": {"authorization": []}},
                                   format="json")
    assert stale.status_code == 409
    assert clients["outsider"].put(users + "us.app/", {"spec": {"username": "app"}},
                                   format="json").status_code == 404
    assert len(MessagingUser.objects.get(username="app").authorization) == 1


@pytest.mark.parametrize("spec, field", [
    ({"messageTtl": {"minimum": 100}}, "spec.messageTtl.minimum"),
    ({"messageRedelivery": {"redeliveryDelay": 1000}}, "spec.messageRedelivery.redeliveryDelay"),
    ({"messageRedelivery": {"maximumDeliveryDelay": 9000}},
     "spec.messageRedelivery.maximumDeliveryDelay"),
    ({"messageRedelivery": {"redeliveryDelayMultiplier": 2}},
     "spec.messageRedelivery.redeliveryDelayMultiplier"),
])
def test_what_nothing_enforces_is_refused_naming_it_and_why(addresses, clients, spec, field):
    """No broker or router here can delay a redelivery or raise a sender's TTL: asking for it
    is a 400 that names the field and says why, on an address and on an address plan, and
    changes nothing; 0 (or a multiplier of 1) asks for nothing and is taken."""
    before = Address.objects.get(name="bs.orders").spec
    answer = clients["admin"].patch(addresses + "bs.orders/", {"spec": spec}, format="json")
    assert answer.status_code == 400 and answer.json()["field"] == field
    assert "cannot be enforced" in answer.json()["message"]
    assert Address.objects.get(name="bs.orders").spec == before
    answer = clients["admin"].post(addresses, address_manifest("bs", "more", **spec),
                                   format="json")
    assert answer.status_code == 400 and answer.json()["field"] == field
    operator = client_for(make_user("sam", staff=True))
    answer = operator.post("/api/v1/addressplans/", {
        "metadata": {"name": "delaying"}, "spec": {"addressType": "queue", **spec}},
        format="json")
    assert answer.status_code == 400 and answer.json()["field"] == field
    nothing = {key: {k: (1 if k == "redeliveryDelayMultiplier" else 0) for k in value}
               for key, value in spec.items()}
    answer = clients["admin"].patch(addresses + "bs.orders/", {"spec": nothing}, format="json")
    assert answer.status_code == 200, answer.content


def test_a_value_stored_before_it_was_refused_does_not_block_other_changes(addresses, clients):
    Address.objects.filter(name="bs.orders").update(spec={
        "messageTtl": {"minimum": 100, "maximum": 60000},
        "messageRedelivery": {"redeliveryDelay": 500}})
    answer = clients["admin"].patch(addresses + "bs.orders/", {"spec": {
        "messageTtl": {"maximum": 5000}}}, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["spec"]["messageTtl"] == {"minimum": 100, "maximum": 5000}
    answer = clients["admin"].patch(addresses + "bs.orders/", {"spec": {
        "messageRedelivery": {"redeliveryDelay": 900}}}, format="json")
    assert answer.status_code == 400
    assert answer.json()["field"] == "spec.messageRedelivery.redeliveryDelay"
