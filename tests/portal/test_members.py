"""The portal's Members page: owners invite by email, change roles, remove members, revoke
invitations and delete the tenant; nobody else can, and the server refuses them anyway."""
import re

from django.test import Client

from eventlog.models import ConfigEvent
from tenants.models import Invitation, Membership, Tenant


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_an_owner_invites_by_email_and_sees_the_link_once(tenant, owner, mailer):
    client = signed_in(owner)
    url = f"/portal/t/{tenant.slug}/members/"
    page = client.get(url)
    assert b"Invite someone" in page.content and b"Delete this tenant" in page.content
    page = client.post(url, {"email": "nina@example.com", "role": "admin"})
    assert page.status_code == 200
    link = re.search(rb"<code>(https://maas.example.com/invitations/maas_inv_[\w-]+/)</code>",
                     page.content).group(1).decode()
    [message] = mailer.messages
    assert link in message.get_payload()
    assert b'data-invitation="nina@example.com"' in page.content
    assert b"maas_inv_" not in client.get(url).content  # shown once


def test_a_bad_address_is_an_error_on_its_field_and_changes_nothing(tenant, owner, mailer):
    events = ConfigEvent.objects.count()
    page = signed_in(owner).post(f"/portal/t/{tenant.slug}/members/",
                                 {"email": "not-an-address", "role": "admin"})
    assert page.status_code == 200 and b"Enter a valid email address." in page.content
    assert ConfigEvent.objects.count() == events and not Invitation.objects.exists()


def test_an_admin_or_viewer_sees_no_controls_and_is_refused(tenant, admin_member, viewer,
                                                             outsider, mailer):
    url = f"/portal/t/{tenant.slug}/members/"
    for user in (admin_member, viewer):
        client = signed_in(user)
        page = client.get(url)
        assert page.status_code == 200 and b'data-member="olivia"' in page.content
        assert b"Invite someone" not in page.content and b"Delete this tenant" not in page.content
        assert client.post(url, {"email": "x@example.com", "role": "owner"}).status_code == 403
        assert client.post(f"{url}vera/role/", {"role": "owner"}).status_code == 403
        assert client.post(f"/portal/t/{tenant.slug}/delete/",
                           {"name": tenant.slug}).status_code == 403
    assert signed_in(outsider).get(url).status_code == 404
    assert not Invitation.objects.exists()
    assert Membership.objects.get(tenant=tenant, user=viewer).role == "viewer"
    assert Tenant.objects.get(pk=tenant.pk).deleted_at is None


def test_an_owner_changes_roles_but_never_leaves_the_tenant_without_one(tenant, owner, viewer):
    client = signed_in(owner)
    url = f"/portal/t/{tenant.slug}/members/"
    client.post(f"{url}vera/role/", {"role": "admin"})
    assert Membership.objects.get(tenant=tenant, user=viewer).role == "admin"
    page = client.post(f"{url}olivia/role/", {"role": "viewer"}, follow=True)
    assert b"A tenant keeps at least one owner." in page.content
    assert Membership.objects.get(tenant=tenant, user=owner).role == "owner"
    assert client.post(f"{url}vera/remove/").status_code == 302
    assert not Membership.objects.filter(tenant=tenant, user=viewer).exists()


def test_an_owner_revokes_an_invitation(tenant, owner, mailer):
    client = signed_in(owner)
    client.post(f"/portal/t/{tenant.slug}/members/", {"email": "nina@example.com",
                                                      "role": "viewer"})
    invitation = Invitation.objects.get()
    client.post(f"/portal/t/{tenant.slug}/invitations/{invitation.uid}/revoke/")
    invitation.refresh_from_db()
    assert invitation.revoked_at is not None
    page = client.get(f"/portal/t/{tenant.slug}/members/")
    assert b"No pending invitations." in page.content


def test_deleting_the_tenant_needs_its_name_typed(tenant, owner):
    client = signed_in(owner)
    url = f"/portal/t/{tenant.slug}/delete/"
    page = client.post(url, {"name": "not-it"})
    assert page.status_code == 200 and f"Type {tenant.slug} exactly".encode() in page.content
    assert Tenant.objects.get(pk=tenant.pk).deleted_at is None
    assert client.post(url, {"name": tenant.slug}).status_code == 302
    assert Tenant.objects.get(pk=tenant.pk).deleted_at is not None
    assert client.get(f"/portal/t/{tenant.slug}/").status_code == 404
