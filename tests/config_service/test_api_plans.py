"""Plans as resources: every signed-in user reads them, operators (staff) alone create, replace,
patch and delete them, each change an event of the plans stream; a plan in use stays, and new
credits re-place the addresses of the spaces that use the plan."""
import pytest

from config_service.models import Address, AddressSpace
from eventlog.log import PLANS_STREAM
from eventlog.models import ConfigEvent, Outbox
from tenants.models import AddressPlan, AddressSpacePlan
from tests.conftest import address_manifest, client_for, make_user, space_manifest

ADDRESS_PLANS = "/api/v1/addressplans/"
SPACE_PLANS = "/api/v1/addressspaceplans/"


@pytest.fixture
def operator(db):
    return client_for(make_user("sam", staff=True))


def address_plan(name="ops-queue", broker=0.4, **spec) -> dict:
    return {"apiVersion": "admin.enmasse.io/v1beta2", "kind": "AddressPlan",
            "metadata": {"name": name},
            "spec": {"addressType": "queue", "resources": {"router": 0.001, "broker": broker},
                     **spec}}


def space_plan(name="ops-small", plans=("ops-queue",), **limits) -> dict:
    return {"apiVersion": "admin.enmasse.io/v1beta2", "kind": "AddressSpacePlan",
            "metadata": {"name": name},
            "spec": {"addressSpaceType": "standard", "addressPlans": list(plans),
                     "resourceLimits": {"router": 1.0, "broker": 1.0, "aggregate": 2.0,
                                        **limits}}}


def plan_events(type_name=None):
    events = ConfigEvent.objects.filter(stream_id=PLANS_STREAM)
    return events.filter(type=type_name) if type_name else events


@pytest.fixture
def ops_space(tenant, clients, operator):
    """A standard space of the operator's plan `ops-small`, with queues a and b of
    `ops-queue` (0.4 broker credits each: both on broker-0)."""
    assert operator.post(ADDRESS_PLANS, address_plan(), format="json").status_code == 201
    assert operator.post(SPACE_PLANS, space_plan(), format="json").status_code == 201
    spaces = f"/api/v1/tenants/{tenant.slug}/addressspaces/"
    created = clients["owner"].post(spaces, space_manifest("ops", "standard", "ops-small"),
                                    format="json")
    assert created.status_code == 201, created.content
    addresses = f"{spaces}ops/addresses/"
    for name in ("a", "b"):
        answer = clients["owner"].post(addresses, address_manifest("ops", name, "queue",
                                                                   "ops-queue"), format="json")
        assert answer.json()["status"]["phase"] == "Configuring"
    return addresses


def test_every_signed_in_user_reads_the_plans(tenant, clients, operator):
    operator.post(ADDRESS_PLANS, address_plan(), format="json")
    for who in ("viewer", "outsider"):
        listed = clients[who].get(ADDRESS_PLANS + "?type=queue").json()
        assert "ops-queue" in [p["metadata"]["name"] for p in listed["items"]]
        assert clients[who].get(ADDRESS_PLANS + "ops-queue/").json()["spec"]["resources"] == {
            "router": 0.001, "broker": 0.4}
    assert clients["anonymous"].get(ADDRESS_PLANS).status_code == 401
    assert clients["outsider"].get(ADDRESS_PLANS + "no-such-plan/").status_code == 404


def test_an_operator_creates_plans_as_events_of_the_plans_stream(operator):
    answer = operator.post(ADDRESS_PLANS, address_plan(displayName="Ops queue"), format="json")
    assert answer.status_code == 201, answer.content
    assert answer.json()["spec"] == {
        "addressType": "queue", "resources": {"router": 0.001, "broker": 0.4}, "partitions": 1,
        "displayName": "Ops queue", "displayOrder": 0, "shortDescription": "",
        "longDescription": ""}
    assert answer.json()["metadata"]["resourceVersion"] == "1"
    answer = operator.post(SPACE_PLANS, space_plan(), format="json")
    assert answer.status_code == 201, answer.content
    assert answer.json()["spec"]["addressPlans"] == ["ops-queue"]
    assert answer.json()["spec"]["infraConfigRef"] == "default"
    created = list(plan_events().values_list("type", "sequence", "tenant_id"))
    assert created == [("address_plan.created", 1, None),
                       ("address_space_plan.created", 2, None)]
    assert all(e.actor.endswith(":sam") for e in plan_events())
    assert AddressSpacePlan.objects.get(name="ops-small").address_plans.get().name == "ops-queue"
    # The audit trail of operators shows them, belonging to no tenant.
    audit = operator.get("/api/v1/audit/?type=address_plan.created").json()["items"]
    assert [(e["payload"]["name"], e["tenant"]) for e in audit] == [("ops-queue", None)]


@pytest.mark.parametrize("role", ["owner", "admin", "viewer"])
def test_no_tenant_member_writes_plans_403(tenant, clients, operator, role):
    operator.post(ADDRESS_PLANS, address_plan(), format="json")
    client = clients[role]
    writes = [
        client.post(ADDRESS_PLANS, address_plan("mine"), format="json"),
        client.post(SPACE_PLANS, space_plan("mine"), format="json"),
        client.put(ADDRESS_PLANS + "ops-queue/", address_plan(broker=0.0), format="json"),
        client.patch(ADDRESS_PLANS + "ops-queue/", {"spec": {"partitions": 2}}, format="json"),
        client.patch(SPACE_PLANS + "standard-small/", {"spec": {"resourceLimits": {
            "broker": 100}}}, format="json"),
        client.delete(ADDRESS_PLANS + "ops-queue/"),
        client.delete(SPACE_PLANS + "standard-small/"),
    ]
    assert [w.status_code for w in writes] == [403] * len(writes)
    assert {w.json()["code"] for w in writes} == {"permission_denied"}
    assert plan_events().count() == 1
    assert AddressPlan.objects.get(name="ops-queue").resources["broker"] == 0.4
    assert not AddressPlan.objects.filter(name="mine").exists()


@pytest.mark.parametrize("url, manifest, field", [
    (ADDRESS_PLANS, address_plan(addressType="lake"), "spec.addressType"),
    (ADDRESS_PLANS, address_plan(resources={"router": -1}), "spec.resources.router"),
    (ADDRESS_PLANS, address_plan(resources={"disk": 1}), "spec.resources.disk"),
    (ADDRESS_PLANS, address_plan(partitions=0), "spec.partitions"),
    (ADDRESS_PLANS, address_plan(messageTtl={"maximum": -5}), "spec.messageTtl.maximum"),
    (ADDRESS_PLANS, address_plan(colour="red"), "spec.colour"),
    (ADDRESS_PLANS, address_plan("Not A Name"), "metadata.name"),
    (ADDRESS_PLANS, address_plan("standard-small-queue"), "metadata.name"),  # taken: 409
    (SPACE_PLANS, space_plan(plans=["ops-queue", "aaa-nope"]), "spec.addressPlans[1]"),
    (SPACE_PLANS, {**space_plan(), "spec": {"addressSpaceType": "brokered",
                                            "addressPlans": ["standard-small-anycast"]}},
     "spec.addressPlans[0]"),
    (SPACE_PLANS, space_plan(aggregate="lots"), "spec.resourceLimits.aggregate"),
    (SPACE_PLANS, {**space_plan(), "spec": {**space_plan()["spec"],
                                            "routerPolicy": {"maxConnections": 0}}},
     "spec.routerPolicy"),
    (SPACE_PLANS, {**space_plan(), "spec": {"addressSpaceType": "huge"}},
     "spec.addressSpaceType"),
    (SPACE_PLANS, {**space_plan(), "spec": {**space_plan()["spec"],
                                            "infraConfigRef": "no-such-config"}},
     "spec.infraConfigRef"),
])
def test_bad_plan_input_names_the_field_and_changes_nothing(operator, url, manifest, field):
    operator.post(ADDRESS_PLANS, address_plan(), format="json")
    before = plan_events().count()
    answer = operator.post(url, manifest, format="json")
    assert answer.status_code in (400, 409)
    assert answer.json()["field"] == field
    assert plan_events().count() == before


def test_put_replaces_a_plan_spec_and_left_out_fields_return_to_defaults(operator):
    operator.post(ADDRESS_PLANS, address_plan(partitions=3, messageTtl={"maximum": 60000},
                                              displayName="Ops"), format="json")
    answer = operator.put(ADDRESS_PLANS + "ops-queue/", {"spec": {"addressType": "queue"}},
                          format="json")
    assert answer.status_code == 200, answer.content
    spec = answer.json()["spec"]
    assert spec["resources"] == {} and spec["partitions"] == 1 and spec["displayName"] == ""
    assert "messageTtl" not in spec
    assert answer.json()["metadata"]["resourceVersion"] == "2"
    event = plan_events("address_plan.changed").get()
    assert event.payload["previous"]["partitions"] == 3 and event.payload["spec"] == spec


def test_patch_merges_into_a_plan_spec(operator):
    operator.post(ADDRESS_PLANS, address_plan(messageTtl={"maximum": 60000},
                                              messageRedelivery={"maximumDeliveryAttempts": 5},
                                              displayName="Ops"), format="json")
    answer = operator.patch(ADDRESS_PLANS + "ops-queue/",
                            {"spec": {"messageRedelivery": {"maximumDeliveryAttempts": None},
                                      "partitions": 2}}, format="json")
    assert answer.status_code == 200, answer.content
    spec = answer.json()["spec"]
    assert spec["messageTtl"] == {"maximum": 60000} and "messageRedelivery" not in spec
    assert spec["partitions"] == 2 and spec["displayName"] == "Ops"
    assert spec["resources"] == {"router": 0.001, "broker": 0.4}
    # The RFC 7386 media type is taken as well.
    answer = operator.patch(ADDRESS_PLANS + "ops-queue/", b'{"spec": {"displayOrder": 7}}',
                            content_type="application/merge-patch+json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["spec"]["displayOrder"] == 7 and spec["partitions"] == 2


def test_a_stale_resource_version_of_a_plan_is_a_409(operator):
    operator.post(ADDRESS_PLANS, address_plan(), format="json")
    first = operator.patch(ADDRESS_PLANS + "ops-queue/", {
        "metadata": {"resourceVersion": "1"}, "spec": {"displayName": "One"}}, format="json")
    assert first.status_code == 200
    stale = operator.put(ADDRESS_PLANS + "ops-queue/", {
        "metadata": {"resourceVersion": "1"}, "spec": {"addressType": "queue"}}, format="json")
    assert stale.status_code == 409
    assert stale.json()["field"] == "metadata.resourceVersion"
    gone = operator.delete(ADDRESS_PLANS + "ops-queue/", HTTP_IF_MATCH='"1"')
    assert gone.status_code == 409
    assert AddressPlan.objects.get(name="ops-queue").display_name == "One"


def test_a_plan_in_use_cannot_be_deleted(ops_space, operator):
    in_use = operator.delete(SPACE_PLANS + "ops-small/")
    assert in_use.status_code == 409 and "/ops)" in in_use.json()["message"]
    used = operator.delete(ADDRESS_PLANS + "ops-queue/")
    assert used.status_code == 409 and "ops.a" in used.json()["message"]
    # Offered by a space plan, though no address uses it: still refused.
    operator.post(ADDRESS_PLANS, address_plan("spare"), format="json")
    operator.patch(SPACE_PLANS + "ops-small/", {"spec": {"addressPlans": ["ops-queue", "spare"]}},
                   format="json")
    offered = operator.delete(ADDRESS_PLANS + "spare/")
    assert offered.status_code == 409 and "ops-small" in offered.json()["message"]
    assert AddressPlan.objects.filter(name__in=["ops-queue", "spare"]).count() == 2
    operator.patch(SPACE_PLANS + "ops-small/", {"spec": {"addressPlans": ["ops-queue"]}},
                   format="json")
    assert operator.delete(ADDRESS_PLANS + "spare/").status_code == 204
    assert not AddressPlan.objects.filter(name="spare").exists()
    assert plan_events("address_plan.deleted").get().payload["name"] == "spare"


def test_the_type_of_a_plan_in_use_cannot_change(ops_space, operator):
    answer = operator.patch(ADDRESS_PLANS + "ops-queue/", {"spec": {"addressType": "topic"}},
                            format="json")
    assert answer.status_code == 400 and answer.json()["field"] == "spec.addressType"
    answer = operator.patch(SPACE_PLANS + "ops-small/", {"spec": {"addressSpaceType": "brokered",
                                                                  "addressPlans": []}},
                            format="json")
    assert answer.status_code == 400 and answer.json()["field"] == "spec.addressSpaceType"


def _state(name):
    a = Address.objects.get(name=name)
    return a.scheduled, a.pending_reason, a.plan_status["resources"]["broker"]


def test_raising_a_plans_credits_sends_an_address_that_no_longer_fits_pending(
        ops_space, operator, clients):
    space = AddressSpace.objects.get(name="ops")
    before = space.last_sequence
    answer = operator.patch(ADDRESS_PLANS + "ops-queue/",
                            {"spec": {"resources": {"broker": 0.6}}}, format="json")
    assert answer.status_code == 200, answer.content
    # a keeps broker-0 with its new credits; b would need a second broker: over the plan.
    assert _state("ops.a") == (True, "", 0.6)
    assert _state("ops.b") == (False, "Quota exceeded", 0.6)
    b = clients["viewer"].get(ops_space + "ops.b/").json()
    assert b["status"]["phase"] == "Pending" and b["status"]["messages"] == ["Quota exceeded"]
    assert b["status"]["planStatus"]["resources"]["broker"] == 0.6
    # The changes are events of the space's own stream, queued for its agents.
    changed = ConfigEvent.objects.filter(stream_id=space.uid, sequence__gt=before)
    assert [(e.type, e.payload["name"]) for e in changed] == [
        ("address.plan_changed", "ops.a"), ("address.plan_changed", "ops.b")]
    assert Outbox.objects.filter(event__in=changed).count() == 2
    assert clients["outsider"].get(ops_space + "ops.b/").status_code == 404
    # Lowering them again fits b back in.
    operator.patch(ADDRESS_PLANS + "ops-queue/", {"spec": {"resources": {"broker": 0.4}}},
                   format="json")
    assert _state("ops.a") == (True, "", 0.4) and _state("ops.b") == (True, "", 0.4)
    assert clients["viewer"].get(ops_space + "ops.b/").json()["status"]["phase"] == "Configuring"


def test_lowering_a_space_plans_limits_re_evaluates_its_spaces(ops_space, operator, clients):
    operator.patch(SPACE_PLANS + "ops-small/", {"spec": {"resourceLimits": {"broker": 2.0,
                                                                            "aggregate": 3.0}}},
                   format="json")
    operator.patch(ADDRESS_PLANS + "ops-queue/", {"spec": {"resources": {"broker": 0.6}}},
                   format="json")
    assert _state("ops.a")[0] and _state("ops.b")[0]  # now on two brokers
    answer = operator.patch(SPACE_PLANS + "ops-small/",
                            {"spec": {"resourceLimits": {"broker": 1.0}}}, format="json")
    assert answer.status_code == 200, answer.content
    assert _state("ops.a") == (True, "", 0.6)
    assert _state("ops.b") == (False, "Quota exceeded", 0.6)
    space = clients["viewer"].get(ops_space.removesuffix("addresses/")).json()
    assert space["status"]["planStatus"]["resourceLimits"]["broker"] == 1.0
    assert ConfigEvent.objects.filter(stream_id=AddressSpace.objects.get(name="ops").uid,
                                      type="address_space.plan_changed").count() == 2


def test_a_display_change_re_places_nothing(ops_space, operator):
    space = AddressSpace.objects.get(name="ops")
    before = space.last_sequence
    operator.patch(ADDRESS_PLANS + "ops-queue/", {"spec": {"displayName": "Renamed"}},
                   format="json")
    operator.patch(SPACE_PLANS + "ops-small/", {"spec": {"shortDescription": "Small"}},
                   format="json")
    space.refresh_from_db()
    assert space.last_sequence == before
    assert plan_events("address_plan.changed").count() == 1


def test_a_plan_naming_an_infra_config_no_longer_defined_can_still_change_other_fields(operator):
    operator.post(ADDRESS_PLANS, address_plan(), format="json")
    assert operator.post(SPACE_PLANS, space_plan(), format="json").status_code == 201
    AddressSpacePlan.objects.filter(name="ops-small").update(infra_config_ref="gone-config")
    answer = operator.patch(SPACE_PLANS + "ops-small/", {"spec": {"resourceLimits": {
        "router": 2.0, "broker": 1.0, "aggregate": 3.0}}}, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["spec"]["infraConfigRef"] == "gone-config"
    answer = operator.patch(SPACE_PLANS + "ops-small/", {"spec": {
        "infraConfigRef": "another-gone"}}, format="json")
    assert answer.status_code == 400 and answer.json()["field"] == "spec.infraConfigRef"
