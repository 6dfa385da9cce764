"""Every answer that shows a secret (a new messaging-user password, an invitation link, the
invitation page whose URL is the link) says Cache-Control: no-store, so that no browser history,
back button or shared proxy keeps it."""
import re

import pytest
from django.test import Client

from config_service import services
from tests.conftest import CTX, b64, make_user


@pytest.fixture
def space(tenant):
    return services.create_address_space(ctx=CTX, tenant=tenant, name="vault", type="brokered",
                                         plan="brokered-single-broker")


@pytest.fixture
def browser(owner) -> Client:
    client = Client()
    client.force_login(owner)
    return client


def directives(response) -> set[str]:
    return {d.strip().lower() for d in response.get("Cache-Control", "").split(",") if d.strip()}


def test_the_portal_page_showing_a_new_messaging_users_password_is_not_stored(tenant, space,
                                                                             browser):
    response = browser.post(f"/portal/t/{tenant.slug}/spaces/vault/users/",
                            {"username": "app", "send": "orders", "recv": "orders"})
    assert b'data-testid="new-password"' in response.content
    assert "no-store" in directives(response)


def test_the_portal_page_showing_a_rotated_password_is_not_stored(tenant, space, browser):
    services.create_messaging_user(
        ctx=CTX, space=space, username="app",
        authentication={"type": "password", "password": b64("first-password")},
        authorization=[{"addresses": ["orders"], "operations": ["send"]}])
    response = browser.post(f"/portal/t/{tenant.slug}/spaces/vault/users/vault.app/rotate/")
    assert b'data-testid="new-password"' in response.content
    assert "no-store" in directives(response)


def test_the_portal_page_showing_an_invitation_link_is_not_stored(tenant, browser):
    response = browser.post(f"/portal/t/{tenant.slug}/members/",
                            {"email": "nina@example.com", "role": "viewer"})
    assert b"maas_inv_" in response.content
    assert "no-store" in directives(response)


@pytest.mark.parametrize("collection, code", [("invitations", 201), ("members", 202)])
def test_the_api_answer_with_an_invitation_link_is_not_stored(tenant, clients, collection, code):
    response = clients["owner"].post(f"/api/v1/tenants/{tenant.slug}/{collection}/",
                                     {"spec": {"email": "nina@example.com", "role": "viewer"}},
                                     format="json")
    assert response.status_code == code
    assert "maas_inv_" in response.json()["status"]["acceptUrl"]
    assert "no-store" in directives(response)


def test_the_invitation_page_whose_url_is_the_secret_is_not_stored(tenant, clients):
    link = clients["owner"].post(f"/api/v1/tenants/{tenant.slug}/invitations/",
                                 {"spec": {"email": "nina@example.com", "role": "viewer"}},
                                 format="json").json()["status"]["acceptUrl"]
    token = re.search(r"maas_inv_[\w-]+", link).group(0)
    nina = make_user("nina")
    nina.email = "nina@example.com"
    nina.save()
    invitee = Client()
    invitee.force_login(nina)
    response = invitee.get(f"/invitations/{token}/")
    assert response.status_code == 200 and b"Accept and join" in response.content
    assert "no-store" in directives(response)
