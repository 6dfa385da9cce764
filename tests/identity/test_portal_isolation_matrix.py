"""Every portal page x (anonymous, outsider, viewer, admin, owner, staff) x (GET, POST) gets the
code the role table (tenants/roles.py, docs/authorization.md) says.

As in the API's matrix, the cases come from the URL configuration, so a new page is covered
without editing this file, and the action a page needs is the last one it asks tenant_for()
about (recorded on a rolled-back request by staff; a form page asks for READ, then for the
write on POST). Anonymous visitors are sent to the sign-in; a method a page does not take is
refused with 405 to everyone signed in, before any tenant is looked up; an outsider gets 404.
"""
import pytest
from django.test import Client

from config_service.portal import base as portal_base
from eventlog.models import ConfigEvent
from tenants.roles import Action, role_allows

from .matrix import ROLES, build_world, endpoints, recording_actions, rolled_back, url_for

CASES = [
    pytest.param(route, name, method, id=f"{name}-{method}")
    for route, name, _ in sorted(endpoints("portal/"), key=lambda e: e[0])
    for method in ("get", "post")
]


@pytest.fixture
def world(tenant, owner, admin_member, viewer, outsider):
    users, kwargs = build_world(tenant, owner, admin_member, viewer, outsider)
    clients = {}
    for role, user in users.items():
        clients[role] = Client()
        if user is not None:
            clients[role].force_login(user)
    return clients, kwargs


def outcome(response) -> int | str:
    """The status; a page shown or a redirect other than to the sign-in counts as "ok"."""
    code = response.status_code
    if code == 200 or (code == 302 and not response["Location"].startswith("/accounts/login/")):
        return "ok"
    return "sign-in" if code == 302 else code


def expected(role: str, method_taken: bool, tenant_scoped: bool, action: Action | None):
    if role == "anonymous":
        return "sign-in"
    if not method_taken:
        return 405
    if not tenant_scoped or role == "staff":
        return "ok"
    if role == "outsider":
        return 404
    return "ok" if role_allows(role, action) else 403


@pytest.mark.parametrize("route, name, method", CASES)
def test_each_role_gets_what_the_role_table_says(world, route, name, method):
    clients, kwargs = world
    url = url_for(route, kwargs)
    with recording_actions(portal_base) as asked:
        by_staff = rolled_back(lambda: getattr(clients["staff"], method)(url, {}))
    method_taken = by_staff.status_code != 405
    tenant_scoped = "<slug:tenant>" in route
    action = asked[-1] if asked else None

    got, changed = {}, {}
    for role in ROLES:
        def request(role=role):
            events = ConfigEvent.objects.count()
            response = getattr(clients[role], method)(url, {})
            changed[role] = ConfigEvent.objects.count() != events
            return response

        got[role] = outcome(rolled_back(request))

    if tenant_scoped and method_taken:
        assert action is not None, f"{route} never checks the role table"
    if method == "post" and method_taken and tenant_scoped:
        assert action not in (Action.READ, Action.READ_AUDIT), f"a POST to {route} only reads"
    assert got == {role: expected(role, method_taken, tenant_scoped, action) for role in ROLES}
    assert not any(changed[role] for role in ROLES if got[role] != "ok")
