"""Owners invite members in the product; admins read their tenant's audit trail, staff read
every tenant's; local accounts remain the default without a provider."""
from django.contrib.auth import get_user_model

from config_service.models import ConfigEvent
from tenants.identity.provisioning import user_for_claims
from tenants.models import Membership, Role
from tests.conftest import client_for, make_user, space_manifest


def test_an_owner_invites_a_member_who_later_signs_in_with_the_provider(tenant, clients, settings):
    response = clients["owner"].post(f"/api/v1/tenants/{tenant.slug}/members/",
                                     {"metadata": {"name": "nina"}, "spec": {"role": "admin"}},
                                     format="json")
    assert response.status_code == 201, response.content
    settings.MAAS_OIDC_ISSUER = "http://127.0.0.1:1/realms/maas"

    user = user_for_claims({"sub": "s-nina", "preferred_username": "nina"})

    assert user.username == "nina"
    assert Membership.objects.get(tenant=tenant, user=user).role == Role.ADMIN
    event = ConfigEvent.objects.get(type="tenant.member_added", payload__username="nina")
    assert event.actor == "token:default:olivia"


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
