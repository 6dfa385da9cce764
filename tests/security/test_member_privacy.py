"""Adding a member reveals nothing about existing accounts: members join by invitation, by
email, and every answer is the same whether an account behind the name or address exists or
not (apart from ids, timestamps and the secret link). The outsider of tests/conftest.py owns
another tenant; the owner of `tenant` probes for them."""
import json
import re

import pytest
from django.db import transaction
from django.test import Client

from eventlog.models import ConfigEvent
from tenants.models import Membership

NOBODY = "nobody-7c41"  # no account has this name or address


@pytest.fixture
def oscar(outsider):
    outsider.email = "oscar@example.com"
    outsider.save()
    return outsider


def rolled_back(request):
    """The response of `request()`, whose changes are then undone, so two probes meet the same
    tenant."""
    with transaction.atomic():
        response = request()
        transaction.set_rollback(True)
    return response


def neutral(text: str, *words: str) -> str:
    """`text` without what differs between two probes by design: the probed name or address,
    ids, timestamps and invitation links."""
    for word in words:
        text = text.replace(word, "<probed>")
    text = re.sub(r"maas_inv_[\w-]+", "<link>", text)
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<id>", text)
    text = re.sub(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(\+00:00)?", "<time>", text)
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]+"', "<csrf>", text)


def members_url(tenant) -> str:
    return f"/api/v1/tenants/{tenant.slug}/members/"


def test_a_username_of_another_tenant_gets_the_answer_a_name_nobody_has_gets(tenant, clients,
                                                                            oscar):
    def add(name):
        return rolled_back(lambda: clients["owner"].post(
            members_url(tenant), {"metadata": {"name": name}, "spec": {"role": "admin"}},
            format="json"))

    existing, unknown = add("oscar"), add(NOBODY)

    assert (existing.status_code, unknown.status_code) == (400, 400)
    assert existing.content == unknown.content
    assert b"oscar@example.com" not in existing.content
    assert b"signedInYet" not in existing.content
    assert not Membership.objects.filter(user=oscar, tenant=tenant).exists()


def test_a_username_with_an_email_is_refused_alike_and_adds_nobody(tenant, clients, oscar):
    events = ConfigEvent.objects.count()
    response = clients["owner"].post(
        members_url(tenant),
        {"metadata": {"name": "oscar"}, "spec": {"email": "oscar@example.com", "role": "owner"}},
        format="json")
    assert response.status_code == 400
    assert ConfigEvent.objects.count() == events
    assert not Membership.objects.filter(user=oscar, tenant=tenant).exists()


@pytest.mark.parametrize("collection", ["members", "invitations"])
def test_an_existing_accounts_email_gets_the_answer_an_unknown_address_gets(tenant, clients,
                                                                           oscar, collection):
    url = f"/api/v1/tenants/{tenant.slug}/{collection}/"

    def invite(address):
        return rolled_back(lambda: clients["owner"].post(
            url, {"spec": {"email": address, "role": "owner"}}, format="json"))

    existing = invite("oscar@example.com")
    unknown = invite(f"{NOBODY}@example.com")

    assert existing.status_code == unknown.status_code
    assert existing.status_code in (201, 202)
    assert (neutral(existing.content.decode(), "oscar@example.com")
            == neutral(unknown.content.decode(), f"{NOBODY}@example.com"))
    assert sorted(existing.headers) == sorted(unknown.headers)
    body = existing.json()
    assert body["kind"] == "Invitation" and body["status"]["phase"] == "Pending"
    assert body["status"]["acceptedBy"] is None
    assert "signedInYet" not in json.dumps(body) and '"oscar"' not in json.dumps(body)


def test_inviting_an_existing_account_does_not_make_it_a_member(tenant, clients, oscar):
    response = clients["owner"].post(members_url(tenant),
                                     {"spec": {"email": "oscar@example.com", "role": "owner"}},
                                     format="json")
    assert response.status_code == 202
    assert not Membership.objects.filter(user=oscar, tenant=tenant).exists()
    assert not ConfigEvent.objects.filter(tenant=tenant, type="tenant.member_added",
                                          payload__username="oscar").exists()
    listed = clients["owner"].get(members_url(tenant)).json()["items"]
    assert "oscar" not in {m["metadata"]["name"] for m in listed}


@pytest.mark.parametrize("method", ["get", "put", "delete"])
def test_a_member_url_of_another_tenants_user_is_the_404_of_a_name_nobody_has(tenant, clients,
                                                                             oscar, method):
    def probe(name):
        return rolled_back(lambda: getattr(clients["owner"], method)(
            f"{members_url(tenant)}{name}/", {"spec": {"role": "viewer"}}, format="json"))

    existing, unknown = probe("oscar"), probe(NOBODY)

    assert (existing.status_code, unknown.status_code) == (404, 404)
    assert (neutral(existing.content.decode(), "oscar")
            == neutral(unknown.content.decode(), NOBODY))


def test_the_portal_answers_an_existing_accounts_email_as_an_unknown_one(tenant, owner, oscar):
    browser = Client()
    browser.force_login(owner)
    url = f"/portal/t/{tenant.slug}/members/"

    def invite(address):
        return rolled_back(lambda: browser.post(url, {"email": address, "role": "owner"}))

    existing = invite("oscar@example.com")
    unknown = invite(f"{NOBODY}@example.com")

    assert (existing.status_code, unknown.status_code) == (200, 200)
    assert (neutral(existing.content.decode(), "oscar@example.com")
            == neutral(unknown.content.decode(), f"{NOBODY}@example.com"))
    assert b'data-member="oscar"' not in existing.content
    assert not Membership.objects.filter(user=oscar, tenant=tenant).exists()
