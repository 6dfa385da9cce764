"""What the isolation matrices share: the endpoints read from the URL configuration, a tenant
with one of everything, the users of each role, and the action a view asks the role table about.
"""
import contextlib
import sys
import uuid

from django.db import transaction
from django.urls import URLPattern, URLResolver, get_resolver

from tenants.invitations import invite
from tenants.models import AddressPlan, AddressSpacePlan, Role
from tenants.roles import Action
from tenants.services import add_member
from tests.conftest import CTX, address_manifest, b64, client_for, make_user, space_manifest

ROLES = ["anonymous", "outsider", "viewer", "admin", "owner", "staff"]
PLAN = "matrix-plan"  # an address space plan and an address plan of the same name


def endpoints(prefix: str, resolver=None, route_so_far=""):
    """(route, url name, callback) of every endpoint whose route starts with `prefix`."""
    for entry in (resolver or get_resolver()).url_patterns:
        route = route_so_far + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from endpoints(prefix, entry, route)
        elif isinstance(entry, URLPattern) and route.startswith(prefix):
            yield route, entry.name, entry.callback


def user_manifest(name: str) -> dict:
    return {"kind": "MessagingUser", "metadata": {"name": f"matrix.{name}"},
            "spec": {"username": name,
                     "authentication": {"type": "password", "password": b64("s3cret-pass")},
                     "authorization": [{"addresses": ["orders"], "operations": ["send"]}]}}


def build_world(tenant, owner, admin_member, viewer, outsider) -> tuple[dict, dict]:
    """The tenant of tests/conftest.py with a space, an address, a messaging user, one more
    member, a pending invitation and a plan; the outsider owns a tenant of their own.
    Returns (user by role, value of each URL parameter)."""
    owner_client = client_for(owner)
    base = f"/api/v1/tenants/{tenant.slug}/addressspaces/"
    assert owner_client.post(base, space_manifest("matrix"), format="json").status_code == 201
    assert owner_client.post(f"{base}matrix/addresses/", address_manifest("matrix", "orders"),
                             format="json").status_code == 201
    assert owner_client.post(f"{base}matrix/users/", user_manifest("app"),
                             format="json").status_code == 201
    add_member(ctx=CTX, tenant=tenant, user=make_user("mia"), role=Role.VIEWER)
    AddressSpacePlan.objects.create(name=PLAN, address_space_type="brokered")
    AddressPlan.objects.create(name=PLAN, address_type="queue")
    invitation, _ = invite(ctx=CTX, tenant=tenant, email="ivy@example.com", role=Role.VIEWER,
                           invited_by=owner)
    users = {"owner": owner, "admin": admin_member, "viewer": viewer, "outsider": outsider,
             "staff": make_user("sam", staff=True), "anonymous": None}
    kwargs = {"tenant": tenant.slug, "space": "matrix", "address": "matrix.orders",
              "user": "matrix.app", "plan": PLAN, "member": "mia",
              "invitation": invitation.uid, "token": f"maas_inv_{uuid.uuid4().hex}",
              # no client is connected: a role allowed past the role table gets the data
              # plane's "No connection" (LIVE_NOT_FOUND), tests/workers/test_connections.py
              # closes real ones
              "connection": "broker-bm9uZQ"}
    return users, kwargs


# The 404 of an endpoint whose object lives in the data plane (a client connection), as
# opposed to the 404 of a tenant or space the user may not see.
LIVE_NOT_FOUND = "No connection"


def url_for(route: str, kwargs: dict) -> str:
    path = route
    for converter in ("slug", "str", "int", "path", "uuid"):
        for name, value in kwargs.items():
            path = path.replace(f"<{converter}:{name}>", str(value))
    assert "<" not in path, f"give the matrix a value for the parameter in {route}"
    return "/" + path


@contextlib.contextmanager
def recording_actions(*modules):
    """Records each action `modules` ask tenant_for() about, in the list it yields."""
    asked: list[Action] = []
    real = {module: module.tenant_for for module in modules}

    def recording_in(module):
        def recording(user, slug, action):
            asked.append(action)
            return real[module](user, slug, action)
        return recording

    for module in modules:
        module.tenant_for = recording_in(module)
    try:
        yield asked
    finally:
        for module, function in real.items():
            module.tenant_for = function


def modules_of(view) -> list:
    """The modules of a view (its class, or the function as_view made) and of the bases of its
    class that call tenant_for()."""
    cls = view if isinstance(view, type) else getattr(view, "view_class", None)
    classes = cls.__mro__ if cls is not None else ()
    found = {sys.modules[c.__module__] for c in classes} | {sys.modules[view.__module__]}
    return [m for m in found if hasattr(m, "tenant_for")]


def rolled_back(request):
    """Runs `request()` in a transaction that is rolled back; returns its response."""
    with transaction.atomic():
        response = request()
        transaction.set_rollback(True)
    return response
