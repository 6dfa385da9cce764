"""The tenant quota resource: members read it, operators (staff) alone set it, each change is a
`tenant.quota_changed` event with the limits before and after, and bad input changes nothing."""
import pytest

from eventlog.models import ConfigEvent
from tenants.models import QUOTA_FIELDS, TenantQuota
from tests.conftest import client_for, make_user

LIMITS = {"max_address_spaces": 3, "max_addresses": 200, "max_messaging_users": 20,
          "max_credits": 2.5, "messages_per_day": 1_000_000, "bytes_per_day": None,
          "stored_bytes": 10**9, "peak_connections": 50}


@pytest.fixture
def operator(db):
    return client_for(make_user("sam", staff=True))


def url(tenant) -> str:
    return f"/api/v1/tenants/{tenant.slug}/quota/"


def limits_of(tenant) -> dict:
    quota = TenantQuota.objects.get(tenant=tenant)
    return {field: getattr(quota, field) for field in QUOTA_FIELDS}


def quota_events(tenant):
    return ConfigEvent.objects.filter(tenant=tenant, type="tenant.quota_changed")


def test_every_member_reads_the_quota(tenant, clients):
    for role in ("viewer", "admin", "owner"):
        answer = clients[role].get(url(tenant))
        assert answer.status_code == 200
        body = answer.json()
        assert body["kind"] == "TenantQuota" and body["metadata"]["name"] == tenant.slug
        assert body["spec"] == limits_of(tenant)
        assert body["status"] == {"throttled": False, "throttledLimits": [],
                                  "throttleAction": "refuse-senders", "overrideUntil": None}


def test_an_operator_sets_every_limit_and_the_change_is_an_event(tenant, operator, clients):
    before = limits_of(tenant)
    answer = operator.put(url(tenant), {"kind": "TenantQuota", "spec": LIMITS}, format="json")
    assert answer.status_code == 200, answer.json()
    assert answer.json()["spec"] == LIMITS
    assert clients["viewer"].get(url(tenant)).json()["spec"] == LIMITS
    assert limits_of(tenant) == LIMITS
    event = quota_events(tenant).get()
    assert event.payload == {"quota": LIMITS, "previous": before}
    assert event.actor.endswith(":sam")


def test_patch_changes_only_the_limits_given(tenant, operator):
    before = limits_of(tenant)
    answer = operator.patch(url(tenant), {"spec": {"messages_per_day": 5000,
                                                   "max_addresses": None}}, format="json")
    assert answer.status_code == 200
    assert limits_of(tenant) == {**before, "messages_per_day": 5000, "max_addresses": None}


def test_the_same_limits_again_record_no_event(tenant, operator):
    operator.patch(url(tenant), {"spec": {"messages_per_day": 5000}}, format="json")
    assert operator.patch(url(tenant), {"spec": {"messages_per_day": 5000}},
                          format="json").status_code == 200
    assert quota_events(tenant).count() == 1


@pytest.mark.parametrize("role", ["owner", "admin", "viewer"])
def test_no_member_may_raise_their_own_quota(tenant, clients, role):
    before = limits_of(tenant)
    for method in ("put", "patch"):
        answer = getattr(clients[role], method)(url(tenant), {"spec": LIMITS}, format="json")
        assert answer.status_code == 403
        assert answer.json()["code"] == "permission_denied"
    assert clients[role].post(url(tenant) + "evaluate/").status_code == 403
    assert limits_of(tenant) == before and not quota_events(tenant).exists()


def test_an_outsider_gets_404_for_everything(tenant, clients):
    outsider = clients["outsider"]
    assert outsider.get(url(tenant)).status_code == 404
    assert outsider.patch(url(tenant), {"spec": LIMITS}, format="json").status_code == 404
    assert outsider.post(url(tenant) + "evaluate/").status_code == 404
    assert clients["anonymous"].get(url(tenant)).status_code == 401


@pytest.mark.parametrize("spec, field", [
    ({"messages_per_day": -1}, "spec.messages_per_day"),
    ({"messages_per_day": "1000"}, "spec.messages_per_day"),
    ({"bytes_per_day": 1.5}, "spec.bytes_per_day"),
    ({"peak_connections": True}, "spec.peak_connections"),
    ({"stored_bytes": 2**63}, "spec.stored_bytes"),
    ({"max_addresses": 2**31}, "spec.max_addresses"),
    ({"max_credits": -0.5}, "spec.max_credits"),
    ({"max_credits": "2"}, "spec.max_credits"),
    ({"messages_per_day": 10, "throttled": False}, "spec.throttled"),
    ({"messages_per_day": 10, "messagesPerDay": 10}, "spec.messagesPerDay"),
])
def test_bad_values_are_refused_naming_the_field_and_change_nothing(tenant, operator, spec,
                                                                    field):
    before = limits_of(tenant)
    for method in ("patch", "put"):
        body = {"spec": {**LIMITS, **spec} if method == "put" else spec}
        answer = getattr(operator, method)(url(tenant), body, format="json")
        assert answer.status_code == 400, answer.json()
        assert answer.json()["field"] == field
    assert limits_of(tenant) == before and not quota_events(tenant).exists()


def test_put_needs_every_limit(tenant, operator):
    partial = {k: v for k, v in LIMITS.items() if k != "stored_bytes"}
    answer = operator.put(url(tenant), {"spec": partial}, format="json")
    assert answer.status_code == 400 and answer.json()["field"] == "spec.stored_bytes"
    assert operator.put(url(tenant), {"kind": "Tenant", "spec": LIMITS},
                        format="json").json()["field"] == "kind"
    assert not quota_events(tenant).exists()


def test_a_usage_limit_change_has_the_tenant_evaluated_after_commit(
        tenant, operator, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        operator.patch(url(tenant), {"spec": {"max_addresses": 7}}, format="json")
    assert callbacks == []  # not a usage limit: nothing to evaluate
    with django_capture_on_commit_callbacks() as callbacks:
        operator.patch(url(tenant), {"spec": {"messages_per_day": 7}}, format="json")
    assert len(callbacks) == 1
    with django_capture_on_commit_callbacks() as callbacks:
        assert operator.post(url(tenant) + "evaluate/").status_code == 202
    assert len(callbacks) == 1
