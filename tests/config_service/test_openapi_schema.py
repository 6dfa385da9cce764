"""The OpenAPI document is valid, and says what the API really answers: every answer below is
checked against the schema of its operation and status, with no field the schema does not
declare (a typed client depends on both)."""
import copy
import datetime
import json

import pytest
from django.urls import resolve
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from openapi_schema_validator import OAS30Validator
from openapi_spec_validator import validate

from config_service import services
from core.limits import MAX_BODY_BYTES
from tenants.services import throttle
from tests.conftest import CTX, address_manifest, b64, client_for, make_user, space_manifest
from tests.qdrouterd import fake_binary
from workers.usage.job import store

DAY = datetime.date(2026, 11, 20)


@pytest.fixture(scope="module")
def document() -> dict:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(OpenApiJsonRenderer().render(schema))


@pytest.fixture(scope="module")
def strict(document) -> dict:
    """The components, with additionalProperties false on every object: an answer holds no
    field the schema does not declare (a client would drop it, or a typo would go unseen)."""
    components = copy.deepcopy(document["components"])
    for schema in components["schemas"].values():
        if "properties" in schema:
            schema["additionalProperties"] = False
    return components


@pytest.fixture
def conform(document, strict):
    """Checks a test client's response against its operation's schema; returns the body."""
    def check(response, status: int):
        assert response.status_code == status, response.content
        request = response.wsgi_request
        route = "/" + resolve(request.path).route
        template = route.replace("<slug:", "{").replace("<str:", "{").replace(">", "}")
        operation = document["paths"][template][request.method.lower()]
        answer = operation["responses"][str(status)]
        if "content" not in answer:
            assert not response.content
            return None
        schema = answer["content"]["application/json"]["schema"]
        body = response.json()
        OAS30Validator({**schema, "components": strict},
                       format_checker=OAS30Validator.FORMAT_CHECKER).validate(body)
        return body
    return check


def test_the_document_is_valid_openapi(document):
    validate(document)


def test_no_body_is_a_bare_object(document):
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            bodies = [operation.get("requestBody", {})] + list(operation["responses"].values())
            for body in bodies:
                for media, content in body.get("content", {}).items():
                    schema = content["schema"]
                    assert "$ref" in schema or media == "text/csv", (method, path, media)


def test_address_spaces_addresses_and_users(tenant, clients, conform):
    api = clients["owner"]
    spaces = f"/api/v1/tenants/{tenant.slug}/addressspaces/"
    conform(api.post(spaces, space_manifest("brk"), format="json"), 201)
    conform(api.post(spaces, space_manifest("std", "standard"), format="json"), 201)
    conform(api.get(spaces + "?phase=Configuring&limit=1"), 200)
    conform(api.get(spaces + "std/"), 200)
    conform(api.patch(spaces + "std/", {"spec": {"plan": "standard-medium"}}, format="json"), 200)

    addresses = spaces + "std/addresses/"
    conform(api.post(addresses, address_manifest("std", "dlq", "deadletter",
                                                 "standard-deadletter"), format="json"), 201)
    conform(api.post(addresses, address_manifest(
        "std", "orders", "queue", "standard-small-queue", deadletter="dlq", expiry="dlq",
        messageTtl={"maximum": 60000},
        messageRedelivery={"maximumDeliveryAttempts": 3, "redeliveryDelayMultiplier": 1}),
        format="json"), 201)
    conform(api.post(addresses, address_manifest("std", "news", "topic",
                                                 "standard-small-topic"), format="json"), 201)
    conform(api.post(addresses, address_manifest("std", "news-sub", "subscription",
                                                 "standard-small-subscription", topic="news",
                                                 subscription={"maxConsumers": 2}),
                     format="json"), 201)
    conform(api.post(addresses, address_manifest("std", "fan", "multicast",
                                                 "standard-small-multicast"), format="json"), 201)
    conform(api.get(addresses + "?type=queue&search=ord"), 200)
    conform(api.put(addresses + "std.orders/", {"spec": {"plan": "standard-small-queue"}},
                    format="json"), 200)
    conform(api.post(addresses + "std.orders/purge/"), 202)
    conform(api.post(spaces + "brk/addresses/", address_manifest("brk", "q1"), format="json"),
            201)
    conform(api.get(spaces + "brk/addresses/brk.q1/"), 200)

    users = spaces + "std/users/"
    conform(api.post(users, {"metadata": {"name": "std.app"}, "spec": {
        "username": "app", "authentication": {"type": "password", "password": b64("secret-123")},
        "authorization": [{"addresses": ["orders*"], "operations": ["send", "recv"]}]}},
        format="json"), 201)
    conform(api.get(users), 200)
    conform(api.patch(users + "std.app/", {"spec": {"authorization": [
        {"addresses": [], "operations": ["view"]}]}}, format="json"), 200)
    conform(api.get(users + "std.app/"), 200)
    conform(api.delete(users + "std.app/"), 204)
    conform(api.delete(addresses + "std.fan/"), 204)
    conform(api.delete(spaces + "brk/"), 202)
    conform(api.get(f"/api/v1/tenants/{tenant.slug}/events/?after=1&limit=5"), 200)


def test_a_space_with_connectors_and_their_status(tenant, clients, conform, tmp_path,
                                                 monkeypatch):
    fake_binary(tmp_path, monkeypatch)  # spec.connectors need qdrouterd
    api = clients["owner"]
    spaces = f"/api/v1/tenants/{tenant.slug}/addressspaces/"
    manifest = space_manifest("bridge", "standard")
    manifest["spec"]["connectors"] = [{
        "name": "remote", "endpointHosts": [{"host": "amqp.example.com", "port": 5671}],
        "tls": {}, "credentials": {"username": {"value": "app"}, "password": {"value": "pw"}},
        "addresses": [{"name": "orders", "pattern": "orders/*"}], "idleTimeout": 30}]
    body = conform(api.post(spaces, manifest, format="json"), 201)
    assert body["status"]["connectors"][0]["name"] == "remote"  # no router here: not ready
    conform(api.get(spaces + "bridge/"), 200)
    conform(api.put(spaces + "bridge/", {"spec": body["spec"]}, format="json"), 200)


def test_a_pending_address_over_its_plans_credits(tenant, clients, conform):
    api = clients["owner"]
    spaces = f"/api/v1/tenants/{tenant.slug}/addressspaces/"
    api.post(spaces, space_manifest("tiny", "standard", "standard-small"), format="json")
    body = None
    for i in range(40):  # standard-small caps the broker credits; large queues fill it fast
        body = conform(api.post(spaces + "tiny/addresses/", address_manifest(
            "tiny", f"big{i}", "queue", "standard-large-queue"), format="json"), 201)
        if body["status"]["phase"] == "Pending":
            break
    assert body["status"]["messages"] == ["Quota exceeded"]


def test_errors_have_the_one_error_shape(tenant, clients, conform):
    spaces = f"/api/v1/tenants/{tenant.slug}/addressspaces/"
    conform(clients["owner"].post(spaces, {"metadata": {"name": "Bad_Name"}}, format="json"),
            400)
    conform(clients["anonymous"].get(spaces), 401)
    conform(clients["viewer"].post(spaces, space_manifest("x"), format="json"), 403)
    conform(clients["outsider"].get(spaces), 404)
    clients["owner"].post(spaces, space_manifest("dup"), format="json")
    conform(clients["owner"].post(spaces, space_manifest("dup"), format="json"), 409)
    too_big = json.dumps({"metadata": {"name": "x" * MAX_BODY_BYTES}})
    conform(clients["owner"].post(spaces, too_big, content_type="application/json"), 413)


def test_tenants_plans_and_usage(tenant, clients, conform):
    api = clients["owner"]
    conform(api.get("/api/v1/tenants/"), 200)
    conform(api.get(f"/api/v1/tenants/{tenant.slug}/"), 200)
    conform(api.post("/api/v1/tenants/", {"metadata": {"name": "fresh"},
                                          "spec": {"displayName": "Fresh"}}, format="json"), 201)
    api.post("/api/v1/tenants/fresh/addressspaces/", space_manifest("s1"), format="json")
    conform(api.delete("/api/v1/tenants/fresh/"), 202)
    conform(api.get("/api/v1/addressspaceplans/?type=standard"), 200)
    conform(api.get("/api/v1/addressspaceplans/standard-small/"), 200)
    conform(api.get("/api/v1/addressplans/?addressSpacePlan=standard-small"), 200)
    conform(api.get("/api/v1/addressplans/standard-small-queue/"), 200)

    store(DAY, {
        "address_daily": [{"tenant": tenant.slug, "space": "s", "address": "q", "day": DAY,
                           "messages_in": 10, "messages_out": 9, "bytes_in": 1000,
                           "bytes_out": 900, "stored_messages": 1, "stored_bytes": 100}],
        "address_hourly": [{"tenant": tenant.slug, "space": "s", "address": "q",
                            "hour": datetime.datetime(2026, 11, 20, 13, tzinfo=datetime.UTC),
                            "messages_in": 10, "messages_out": 9, "bytes_in": 1000,
                            "bytes_out": 900, "stored_messages": 1, "stored_bytes": 100}],
        "tenant_daily": [{"tenant": tenant.slug, "day": DAY, "messages": 19, "bytes": 1900,
                          "stored_bytes": 100, "connections": 2}],
        "quota": [{"tenant": tenant.slug, "day": DAY, "limit": "messages_per_day", "used": 19,
                   "limit_value": 15, "share": 19 / 15, "breached": True, "forecast_day": None}],
    })
    usage = f"/api/v1/tenants/{tenant.slug}/usage/"
    daily = conform(api.get(usage + "?from=2026-11-19&to=2026-11-21"), 200)
    assert daily["items"] and daily["quota"]["limits"]
    hourly = conform(api.get(usage + "?from=2026-11-20&to=2026-11-20&granularity=hourly"), 200)
    assert hourly["items"][0]["hour"].startswith("2026-11-20T13:00")
    conform(api.get(usage + "?granularity=weekly"), 400)


def test_members_invitations_and_audit(tenant, clients, conform):
    api = clients["owner"]
    base = f"/api/v1/tenants/{tenant.slug}/"
    conform(api.get(base + "members/"), 200)
    conform(api.get(base + "members/vera/"), 200)
    conform(api.put(base + "members/vera/", {"spec": {"role": "admin"}}, format="json"), 200)
    conform(api.delete(base + "members/vera/"), 204)
    conform(api.post(base + "members/", {"spec": {"email": "new@example.com", "role": "viewer"}},
                     format="json"), 202)
    conform(api.post(base + "members/", {"metadata": {"name": "vera"}}, format="json"), 400)
    invited = conform(api.post(base + "invitations/", {"spec": {"email": "b@example.com",
                                                               "role": "admin"}},
                               format="json"), 201)
    conform(api.get(base + "invitations/"), 200)
    conform(api.get(base + f"invitations/{invited['metadata']['name']}/"), 200)
    conform(api.delete(base + f"invitations/{invited['metadata']['name']}/"), 204)
    services.create_address_space(ctx=CTX, tenant=tenant, name="aud", type="brokered",
                                  plan="brokered-single-broker")
    conform(api.get(base + "audit/?type=address_space.created"), 200)
    staff = client_for(make_user("root", staff=True))
    conform(staff.get(f"/api/v1/audit/?tenant={tenant.slug}&limit=3"), 200)
    conform(staff.get("/api/v1/tenants/"), 200)  # a staff member's role is null


def test_the_tenant_quota(tenant, clients, conform):
    base = f"/api/v1/tenants/{tenant.slug}/quota/"
    staff = client_for(make_user("ops", staff=True))
    conform(clients["viewer"].get(base), 200)
    conform(staff.patch(base, {"spec": {"messages_per_day": 10, "max_credits": 1.5}},
                        format="json"), 200)
    conform(staff.put(base, {"spec": {"messages_per_day": 10}}, format="json"), 400)
    conform(clients["owner"].patch(base, {"spec": {"messages_per_day": None}}, format="json"),
            403)
    conform(clients["outsider"].get(base), 404)
    conform(staff.post(base + "evaluate/"), 202)
    throttle(ctx=CTX, tenant=tenant, limits=[{"limit": "messages_per_day", "used": 11,
                                              "limit_value": 10}])
    throttled = conform(clients["viewer"].get(base), 200)
    assert throttled["status"]["throttledLimits"][0]["used"] == 11
    usage = conform(clients["viewer"].get(f"/api/v1/tenants/{tenant.slug}/usage/"), 200)
    assert usage["quota"]["throttledLimits"] == throttled["status"]["throttledLimits"]


def test_plan_writes_lists_and_merge_patches(tenant, clients, conform):
    staff = client_for(make_user("sam", staff=True))
    plans = "/api/v1/addressplans/"
    conform(staff.post(plans, {"kind": "AddressPlan", "metadata": {"name": "ops-queue"},
                               "spec": {"addressType": "queue",
                                        "resources": {"broker": 0.0}}}, format="json"), 201)
    conform(staff.patch(plans + "ops-queue/", {"spec": {"messageTtl": {"maximum": 10}}},
                        format="json"), 200)
    conform(staff.put(plans + "ops-queue/", {"spec": {"addressType": "queue"}}, format="json"),
            200)
    conform(clients["owner"].patch(plans + "ops-queue/", {"spec": {}}, format="json"), 403)
    space_plans = "/api/v1/addressspaceplans/"
    conform(staff.post(space_plans, {"metadata": {"name": "ops-brokered"}, "spec": {
        "addressSpaceType": "brokered", "addressPlans": ["brokered-queue", "ops-queue"]}},
        format="json"), 201)
    conform(staff.patch(space_plans + "ops-brokered/", {"spec": {"routerPolicy": {
        "maxConnections": 10}}}, format="json"), 200)
    conform(staff.delete(space_plans + "brokered-single-broker/"), 204)

    spaces = f"/api/v1/tenants/{tenant.slug}/addressspaces/"
    api = clients["owner"]
    api.post(spaces, space_manifest("ops", plan="ops-brokered"), format="json")
    conform(staff.delete(space_plans + "ops-brokered/"), 409)
    addresses = spaces + "ops/addresses/"
    created = conform(api.post(addresses, {"kind": "AddressList", "items": [
        address_manifest("ops", "a", plan="ops-queue"),
        address_manifest("ops", "b")]}, format="json"), 201)
    assert created["kind"] == "AddressList"
    conform(api.post(addresses, {"kind": "AddressList", "items": [
        address_manifest("ops", "c", plan="nope")]}, format="json"), 400)
    conform(api.patch(addresses + "ops.a/", b'{"spec": {"messageTtl": {"maximum": 5}}}',
                      content_type="application/merge-patch+json"), 200)
    users = conform(api.post(spaces + "ops/users/", {"kind": "MessagingUserList", "items": [{
        "spec": {"username": "app", "authentication": {"password": b64("s3cret-pw")}}}]},
        format="json"), 201)
    assert users["items"][0]["spec"]["username"] == "app"
    conform(api.put(spaces + "ops/users/ops.app/", {"spec": {"username": "app"}},
                    format="json"), 200)
    conform(staff.get("/api/v1/audit/?type=address_plan.created"), 200)
