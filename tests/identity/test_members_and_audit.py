"""Owners invite members in the product, by email only; admins read their tenant's audit trail, staff read
every tenant's; local accounts remain the default without a provider."""
from django.contrib.auth import get_user_model
from django.test import Client

from eventlog.models import ConfigEvent
from tenants.models import Membership, Role
from tests.conftest import client_for, make_user, space_manifest


def test_an_owner_adds_a_member_by_email_who_joins_on_accepting(tenant, clients, mailer):
    response = clients["owner"].post(f"/api/v1/tenants/{tenant.slug}/members/",
                                     {"spec": {"email": "nina@example.com", "role": "admin"}},
                                     format="json")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["kind"] == "Invitation" and body["status"]["phase"] == "Pending"
    assert response["Location"] == (f"/api/v1/tenants/{tenant.slug}/invitations/"
                                    f"{body['metadata']['name']}/")
    assert clients["owner"].get(response["Location"]).json()["spec"]["email"] == (
        "nina@example.com")
    [message] = mailer.messages
    assert message["To"] == "nina@example.com"
    assert not Membership.objects.filter(tenant=tenant, user__username="nina").exists()

    nina = make_user("nina")
    nina.email = "nina@example.com"
    nina.save()
    token = body["status"]["acceptUrl"].rsplit("/", 2)[-2]
    browser = Client()
    browser.force_login(nina)
    assert browser.post(f"/invitations/{token}/").status_code == 302

    assert Membership.objects.get(tenant=tenant, user=nina).role == Role.ADMIN
    event = ConfigEvent.objects.get(type="tenant.invitation_created",
                                    payload__email="nina@example.com")
    assert event.actor == "token:default:olivia"


def test_a_member_asked_for_by_username_is_refused_with_a_pointer_to_invitations(tenant, clients):
    events = ConfigEvent.objects.count()
    response = clients["owner"].post(f"/api/v1/tenants/{tenant.slug}/members/",
                                     {"metadata": {"name": "nina"}, "spec": {"role": "admin"}},
                                     format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "invitation_required"
    assert response.json()["field"] == "metadata.name"
    assert f"/api/v1/tenants/{tenant.slug}/invitations/" in response.json()["message"]
    assert ConfigEvent.objects.count() == events
    assert not get_user_model().objects.filter(username="nina").exists()


def test_the_last_owner_cannot_be_removed_or_demoted(tenant, clients):
    url = f"/api/v1/tenants/{tenant.slug}/members/olivia/"

    assert clients["owner"].delete(url).status_code == 409
    assert clients["owner"].put(url, {"spec": {"role": "viewer"}},
                                format="json").status_code == 409
    assert Membership.objects.get(tenant=tenant, user__username="olivia").role == Role.OWNER


def test_an_admin_reads_the_tenant_audit_trail_with_every_actor(tenant, clients):
    clients["admin"].post(f"/api/v1/tenants/{tenant.slug}/addressspaces/", space_manifest("a"),
                          format="json")

    items = clients["admin"].get(f"/api/v1/tenants/{tenant.slug}/audit/").json()["items"]

    assert {i["tenant"] for i in items} == {tenant.slug}
    assert ("address_space.created", "token:default:adam") in {(i["type"], i["actor"])
                                                               for i in items}
    assert all(i["actor"] for i in items)


def test_staff_read_every_tenant_audit_trail_and_others_may_not(tenant, clients):
    staff = client_for(make_user("sam", staff=True))

    tenants = {i["tenant"] for i in staff.get("/api/v1/audit/?limit=1000").json()["items"]}

    assert len(tenants) == 2  # the tenant and the outsider's own
    assert clients["owner"].get("/api/v1/audit/").status_code == 403


def test_without_a_provider_the_local_sign_in_form_is_shown(db, client, settings):
    settings.MAAS_OIDC_ISSUER = ""
    get_user_model().objects.create_user("lou", password="lou-password-1")

    form = client.get("/accounts/login/")
    response = client.post("/accounts/login/?next=/accounts/me/",
                           {"username": "lou", "password": "lou-password-1",
                            "next": "/accounts/me/"})

    assert form.status_code == 200 and b'name="password"' in form.content
    assert response.status_code == 302 and response["Location"] == "/accounts/me/"
    assert client.get("/accounts/me/").status_code == 200
