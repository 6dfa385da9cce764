"""Every API endpoint x (anonymous, outsider, viewer, admin, owner, staff) x (read, write) gets
the code the role table (tenants/roles.py, docs/authorization.md) says.

The cases come from the URL configuration, so a new endpoint is covered without editing this
file. For a tenant-scoped endpoint the action it needs is the one the view asks tenant_for()
about (recorded on a rolled-back request by staff); the expected code for each role then comes
from role_allows(), and DOCUMENTED pins the actions of the resources docs/authorization.md names.
An endpoint outside a tenant is open to every signed-in user, unless its view says staff_only
(all its methods, or those it names);
a read-only endpoint answers a write with 405 to everyone signed in (no tenant is disclosed).
"""
import uuid

import pytest
from django.db import transaction

from eventlog.models import ConfigEvent
from tenants.roles import Action, role_allows
from tests.conftest import address_manifest, client_for, space_manifest

from .matrix import (
    LIVE_NOT_FOUND,
    ROLES,
    build_world,
    endpoints,
    modules_of,
    recording_actions,
    rolled_back,
    url_for,
    user_manifest,
)

WRITES = ("post", "put", "patch", "delete")


def api_endpoints():
    """(route, url name, view class) of every endpoint under /api/v1/."""
    for route, name, callback in endpoints("api/v1/"):
        view = getattr(callback, "view_class", None)
        if view is not None:
            yield route, name, view


CASES = [
    pytest.param(route, name, view, method, id=f"{name}-{method}")
    for route, name, view in sorted(api_endpoints(), key=lambda e: e[0])
    for method in ("get", *WRITES)
    if hasattr(view, method) or (method == "post" and not any(hasattr(view, w) for w in WRITES))
]


# What docs/authorization.md says each resource's writes need (reads need READ).
DOCUMENTED = {
    ("addressspace-list", "post"): Action.MANAGE_SPACES,
    ("addressspace-detail", "put"): Action.CHANGE_SPACE_PLAN,
    ("addressspace-detail", "patch"): Action.CHANGE_SPACE_PLAN,
    ("addressspace-detail", "delete"): Action.MANAGE_SPACES,
    ("address-list", "post"): Action.MANAGE_ADDRESSES,
    ("address-detail", "put"): Action.MANAGE_ADDRESSES,
    ("address-detail", "patch"): Action.MANAGE_ADDRESSES,
    ("address-detail", "delete"): Action.MANAGE_ADDRESSES,
    ("messaginguser-list", "post"): Action.MANAGE_USERS,
    ("messaginguser-detail", "put"): Action.MANAGE_USERS,
    ("messaginguser-detail", "patch"): Action.MANAGE_USERS,
    ("messaginguser-detail", "delete"): Action.MANAGE_USERS,
    ("member-list", "post"): Action.MANAGE_MEMBERS,
    ("member-detail", "put"): Action.MANAGE_MEMBERS,
    ("member-detail", "patch"): Action.MANAGE_MEMBERS,
    ("member-detail", "delete"): Action.MANAGE_MEMBERS,
    ("invitation-list", "post"): Action.MANAGE_MEMBERS,
    ("invitation-detail", "delete"): Action.MANAGE_MEMBERS,
    ("tenant-detail", "delete"): Action.DELETE_TENANT,
    ("tenant-audit", "get"): Action.READ_AUDIT,
    ("tenant-quota", "put"): Action.SET_QUOTA,
    ("tenant-quota", "patch"): Action.SET_QUOTA,
    ("tenant-quota-evaluate", "post"): Action.SET_QUOTA,
    ("connection-detail", "delete"): Action.CLOSE_CONNECTIONS,
}


# Valid input, so that an allowed request succeeds (2xx); other endpoints get {} and must only
# get past authorization.
BODIES = {
    ("tenant-list", "post"): lambda: {"kind": "Tenant",
                                      "metadata": {"name": f"new-{uuid.uuid4().hex[:6]}"}},
    ("addressspace-list", "post"): lambda: space_manifest("fresh"),
    ("addressspace-detail", "put"): lambda: {"spec": {"plan": "brokered-single-broker"}},
    ("addressspace-detail", "patch"): lambda: {"spec": {"plan": "brokered-single-broker"}},
    ("address-list", "post"): lambda: address_manifest("matrix", "fresh"),
    ("address-detail", "put"): lambda: address_manifest("matrix", "orders"),
    ("address-detail", "patch"): lambda: {"spec": {"plan": "brokered-queue"}},
    ("messaginguser-list", "post"): lambda: user_manifest("fresh"),
    ("messaginguser-detail", "put"): lambda: user_manifest("app"),
    ("messaginguser-detail", "patch"): lambda: user_manifest("app"),
    ("member-list", "post"): lambda: {"spec": {"email": "newbie@example.com", "role": "viewer"}},
    ("member-detail", "put"): lambda: {"spec": {"role": "admin"}},
    ("member-detail", "patch"): lambda: {"spec": {"role": "admin"}},
    ("invitation-list", "post"): lambda: {"spec": {"email": "new@example.com", "role": "viewer"}},
    ("tenant-quota", "put"): lambda: {"spec": {
        "max_address_spaces": 5, "max_addresses": 50, "max_messaging_users": 5, "max_credits": 2,
        "messages_per_day": 10**6, "bytes_per_day": None, "stored_bytes": None,
        "peak_connections": 10}},
    ("tenant-quota", "patch"): lambda: {"spec": {"messages_per_day": 10**6}},
    ("tenant-quota-evaluate", "post"): dict,
    ("addressplan-list", "post"): lambda: {"metadata": {"name": "fresh-plan"},
                                           "spec": {"addressType": "queue"}},
    ("addressplan-detail", "put"): lambda: {"spec": {"addressType": "queue",
                                                     "resources": {"broker": 0.1}}},
    ("addressplan-detail", "patch"): lambda: {"spec": {"partitions": 2}},
    ("addressspaceplan-list", "post"): lambda: {"metadata": {"name": "fresh-plan"},
                                                "spec": {"addressSpaceType": "brokered"}},
    ("addressspaceplan-detail", "put"): lambda: {"spec": {"addressSpaceType": "brokered",
                                                          "addressPlans": ["brokered-queue"]}},
    ("addressspaceplan-detail", "patch"): lambda: {"spec": {"resourceLimits": {"broker": 2}}},
}


@pytest.fixture
def world(tenant, owner, admin_member, viewer, outsider):
    return build_world(tenant, owner, admin_member, viewer, outsider)


def send(client, method: str, url: str, body):
    return getattr(client, method)(url, body, format="json") if method != "get" else client.get(url)


def required_action(view, client, method: str, url: str, body) -> Action | None:
    """The action the view asks tenant_for() about, on a request that is rolled back."""
    with recording_actions(*modules_of(view)) as asked:
        rolled_back(lambda: send(client, method, url, body))
    return asked[0] if asked else None


def expected_code(role: str, view, method: str, action: Action | None, tenant_scoped: bool):
    if role == "anonymous":
        return 401
    if not hasattr(view, method):  # a read-only endpoint: every write is refused alike
        return 405
    if tenant_scoped and role == "outsider":
        return 404
    if tenant_scoped and role != "staff":
        return "2xx" if role_allows(role, action) else 403
    staff_only = getattr(view, "staff_only", False)  # True, or the methods that are
    if (staff_only is True or method in (staff_only or ())) and role != "staff":
        return 403
    return "2xx"


def outcome(response, strict: bool):
    """The status, with success as "2xx"; without a known valid body, any status past
    authorization (not 401, 403, 404 or 5xx) counts as success, and so does the data plane's
    404 for a client connection the world has none of (LIVE_NOT_FOUND)."""
    code = response.status_code
    if 200 <= code < 300 or (not strict and code not in (401, 403, 404) and code < 500):
        return "2xx"
    if code == 404 and response.json().get("message", "").startswith(LIVE_NOT_FOUND):
        return "2xx"
    return code


@pytest.mark.parametrize("route, name, view, method", CASES)
def test_each_role_gets_what_the_role_table_says(world, route, name, view, method):
    users, kwargs = world
    clients = {role: client_for(user) for role, user in users.items()}
    url = url_for(route, kwargs)
    body = BODIES.get((name, method), dict)()
    tenant_scoped = "<slug:tenant>" in route and hasattr(view, method)
    action = required_action(view, clients["staff"], method, url, body) if tenant_scoped else None
    strict = (name, method) in BODIES or method in ("get", "delete") or not hasattr(view, method)

    got, changed = {}, {}
    for role in ROLES:
        with transaction.atomic():  # every role meets the same objects
            events = ConfigEvent.objects.count()
            got[role] = outcome(send(clients[role], method, url, body), strict)
            changed[role] = ConfigEvent.objects.count() != events
            transaction.set_rollback(True)

    if tenant_scoped:
        assert action is not None, f"{route} never checks the role table"
        assert action is DOCUMENTED.get((name, method), action)
        assert (method == "get") == (action in (Action.READ, Action.READ_AUDIT)), action
    assert got == {role: expected_code(role, view, method, action, tenant_scoped)
                   for role in ROLES}
    assert not any(changed[role] for role in ROLES if got[role] != "2xx")
