"""Invitations by email: an owner invites an address, a real SMTP server receives the link, the
person with that address accepts it (in the browser pages, or at once at a provider sign-in
that verified the address); everyone else is refused and nothing changes."""
import datetime
import re

import pytest
from django.test import Client

from eventlog.models import ConfigEvent
from tenants.models import Invitation, Membership, Role, Tenant
from tenants.services import create_tenant
from tests.conftest import CTX, client_for, free_tcp_port, make_user
from tests.identity.conftest import Browser


def invite(client, tenant, address="nina@example.com", role="admin"):
    return client.post(f"/api/v1/tenants/{tenant.slug}/invitations/",
                       {"spec": {"email": address, "role": role}}, format="json")


def browser_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_an_owner_invites_by_email_and_the_invitee_accepts(tenant, clients, mailer):
    response = invite(clients["owner"], tenant)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"]["phase"] == "Pending" and body["status"]["emailSent"] is True
    link = body["status"]["acceptUrl"]
    assert link.startswith("https://maas.example.com/invitations/maas_inv_")

    [message] = mailer.messages
    assert message["To"] == "nina@example.com"
    assert tenant.slug in message["Subject"]
    assert link in message.get_payload()
    # Only the digest is stored, and no read shows the link again.
    token = link.rsplit("/", 2)[-2]
    assert not Invitation.objects.filter(digest=token).exists()
    listed = clients["viewer"].get(f"/api/v1/tenants/{tenant.slug}/invitations/").json()
    assert [i["spec"]["email"] for i in listed["items"]] == ["nina@example.com"]
    assert "acceptUrl" not in listed["items"][0]["status"]

    nina = make_user("nina")
    nina.email = "Nina@Example.com"  # addresses match without regard to case
    nina.save()
    page = browser_of(nina).get(f"/invitations/{token}/")
    assert page.status_code == 200 and b"Accept and join" in page.content
    accepted = browser_of(nina).post(f"/invitations/{token}/")
    assert accepted.status_code == 302
    assert accepted["Location"] == f"/portal/t/{tenant.slug}/"
    assert Membership.objects.get(tenant=tenant, user=nina).role == Role.ADMIN

    types = list(ConfigEvent.objects.filter(tenant=tenant).values_list("type", "actor")
                 .order_by("position"))[-3:]
    assert types == [("tenant.invitation_created", types[0][1]),
                     ("tenant.member_added", "user:nina"),
                     ("tenant.invitation_accepted", "user:nina")]
    assert types[0][1].endswith(":olivia")
    # A link works once: nina is sent on to the tenant, anyone else is told it was used.
    assert browser_of(nina).get(f"/invitations/{token}/")["Location"] == f"/portal/t/{tenant.slug}/"
    twin = make_user("nina2")
    twin.email = "nina@example.com"
    twin.save()
    assert browser_of(twin).post(f"/invitations/{token}/").status_code == 410
    assert not Membership.objects.filter(tenant=tenant, user=twin).exists()


def test_someone_with_another_address_is_refused(tenant, clients, mailer):
    token = invite(clients["owner"], tenant).json()["status"]["acceptUrl"].rsplit("/", 2)[-2]
    mallory = make_user("mallory")
    mallory.email = "mallory@example.com"
    mallory.save()
    events = ConfigEvent.objects.count()
    response = browser_of(mallory).post(f"/invitations/{token}/")
    assert response.status_code == 403
    assert b"This invitation is for nina@example.com" in response.content
    assert not Membership.objects.filter(tenant=tenant, user=mallory).exists()
    assert ConfigEvent.objects.count() == events
    # Signed out, the link asks for a sign-in first.
    assert Client().get(f"/invitations/{token}/")["Location"].startswith("/accounts/login/")
    assert browser_of(mallory).get("/invitations/maas_inv_made-up/").status_code == 404


def test_revoked_and_expired_invitations_cannot_be_accepted(tenant, clients, mailer):
    nina = make_user("nina")
    nina.email = "nina@example.com"
    nina.save()
    created = invite(clients["owner"], tenant).json()
    url = f"/api/v1/tenants/{tenant.slug}/invitations/{created['metadata']['name']}/"
    assert clients["admin"].delete(url).status_code == 403
    assert clients["outsider"].delete(url).status_code == 404
    assert clients["owner"].delete(url).status_code == 204
    assert clients["owner"].get(url).json()["status"]["phase"] == "Revoked"
    token = created["status"]["acceptUrl"].rsplit("/", 2)[-2]
    assert browser_of(nina).post(f"/invitations/{token}/").status_code == 410

    again = invite(clients["owner"], tenant).json()
    Invitation.objects.filter(uid=again["metadata"]["name"]).update(
        expires_at=datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC))
    token = again["status"]["acceptUrl"].rsplit("/", 2)[-2]
    response = browser_of(nina).post(f"/invitations/{token}/")
    assert response.status_code == 410 and b"expired" in response.content
    assert not Membership.objects.filter(tenant=tenant, user=nina).exists()


def test_inviting_an_address_again_replaces_the_pending_link(tenant, clients, mailer):
    first = invite(clients["owner"], tenant).json()
    second = invite(clients["owner"], tenant, role="viewer").json()
    phases = {i["metadata"]["name"]: i["status"]["phase"] for i in
              clients["owner"].get(f"/api/v1/tenants/{tenant.slug}/invitations/").json()["items"]}
    assert phases == {first["metadata"]["name"]: "Revoked", second["metadata"]["name"]: "Pending"}
    assert len(mailer.messages) == 2


@pytest.mark.parametrize("spec, field", [
    ({"email": "not-an-address", "role": "admin"}, "spec.email"),
    ({"role": "admin"}, "spec.email"),
    ({"email": "ok@example.com", "role": "emperor"}, "spec.role"),
    ({"email": "olivia@example.com", "role": "viewer"}, "spec.email"),  # already a member
])
def test_bad_input_is_refused_with_its_field_and_changes_nothing(tenant, clients, owner, spec,
                                                                  field, mailer):
    owner.email = "olivia@example.com"
    owner.save()
    events = ConfigEvent.objects.count()
    response = clients["owner"].post(f"/api/v1/tenants/{tenant.slug}/invitations/",
                                     {"spec": spec}, format="json")
    assert response.status_code in (400, 409)
    assert response.json()["field"] == field
    assert ConfigEvent.objects.count() == events
    assert not Invitation.objects.exists()
    assert mailer.messages == []


def test_an_unreachable_mail_server_still_gives_the_owner_the_link(tenant, clients, settings):
    closed = free_tcp_port()  # nobody listens there
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_USE_TLS = "127.0.0.1", closed, False
    response = invite(clients["owner"], tenant)
    assert response.status_code == 201
    assert response.json()["status"]["emailSent"] is False
    assert re.search(r"/invitations/maas_inv_[\w-]+/$", response.json()["status"]["acceptUrl"])


def test_a_provider_sign_in_with_the_verified_address_accepts_at_once(oidc, db, mailer, app_port):
    """alice's realm account has alice@example.test, verified: her first sign-in makes her a
    member of the tenant she was invited to, and her API token then acts with that role."""
    owner = make_user("bea")
    beta = create_tenant(ctx=CTX, slug="beta", owner=owner)
    response = invite(client_for(owner), beta, address="alice@example.test", role="viewer")
    assert response.status_code == 201
    Browser(oidc, app_port).sign_in("alice", "alice-pw")
    token = oidc.login("alice", "alice-pw")["access_token"]
    api = client_for(None)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    response = api.get("/api/v1/tenants/beta/")
    assert response.status_code == 200, response.content
    assert response.json()["status"]["role"] == "viewer"
    assert Invitation.objects.get(tenant=beta).accepted_by.get_username() == "alice"
    assert Tenant.objects.get(slug="beta").memberships.count() == 2
