"""Fixtures for every test: users in each role, a tenant built through the service functions,
and API clients that authenticate with personal access tokens."""
import base64
import uuid

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from config_service import services
from tenants.models import PersonalAccessToken, Role
from tenants.services import add_member, create_tenant

CTX = services.Context(actor="test")


def make_user(username: str, staff: bool = False):
    return get_user_model().objects.create_user(username=username, password="pw-unused-123",
                                                is_staff=staff)


def client_for(user) -> APIClient:
    client = APIClient()
    if user is not None:
        _, token = PersonalAccessToken.issue(user)
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.fixture
def owner(db):
    return make_user("olivia")


@pytest.fixture
def admin_member(db):
    return make_user("adam")


@pytest.fixture
def viewer(db):
    return make_user("vera")


@pytest.fixture
def outsider(db):
    return make_user("oscar")


@pytest.fixture
def tenant(owner, admin_member, viewer, outsider):
    t = create_tenant(ctx=CTX, slug=f"acme-{uuid.uuid4().hex[:6]}", owner=owner)
    add_member(ctx=CTX, tenant=t, user=admin_member, role=Role.ADMIN)
    add_member(ctx=CTX, tenant=t, user=viewer, role=Role.VIEWER)
    # The outsider owns a tenant of their own, so "not found" is not "has no tenants".
    create_tenant(ctx=CTX, slug=f"other-{uuid.uuid4().hex[:6]}", owner=outsider)
    return t


@pytest.fixture
def api(owner):
    return client_for(owner)


@pytest.fixture
def clients(owner, admin_member, viewer, outsider):
    return {
        "owner": client_for(owner),
        "admin": client_for(admin_member),
        "viewer": client_for(viewer),
        "outsider": client_for(outsider),
        "anonymous": APIClient(),
    }


def space_manifest(name: str, type_: str = "brokered", plan: str | None = None) -> dict:
    plan = plan or ("brokered-single-broker" if type_ == "brokered" else "standard-small")
    return {"apiVersion": "enmasse.io/v1beta1", "kind": "AddressSpace",
            "metadata": {"name": name}, "spec": {"type": type_, "plan": plan}}


def address_manifest(space: str, address: str, type_: str = "queue", plan: str = "brokered-queue",
                     **spec) -> dict:
    return {"apiVersion": "enmasse.io/v1beta1", "kind": "Address",
            "metadata": {"name": f"{space}.{address.lower()}"},
            "spec": {"address": address, "type": type_, "plan": plan, **spec}}
