"""API bearer tokens from the provider: validated locally against its key set, refused with a
clear reason (401, nothing changed) when expired, not yet valid, for another audience or issuer,
tampered or signed with an unknown key; a token only finds the user a sign-in provisioned and
never changes roles; a client's own token is a service identity with no role; personal access
tokens keep working."""
import base64
import json
import time

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from config_service.models import AddressSpace
from eventlog.models import ConfigEvent
from tenants.identity.jwks import keys as jwks_cache
from tenants.identity.models import OidcIdentity
from tenants.models import Membership
from tenants.services import create_tenant
from tests.conftest import CTX, client_for, make_user, space_manifest

from .conftest import USERS, Browser, new_key


@pytest.fixture
def acme(db):
    from tenants import default_plans
    from tenants.models import AddressPlan, AddressSpacePlan

    default_plans.install(AddressPlan, AddressSpacePlan)
    return create_tenant(ctx=CTX, slug="acme", owner=make_user("founder"))


@pytest.fixture
def sign_in(oidc, app_port):
    """Signs a realm user in to MaaS through the browser flow (what provisions them)."""
    def sign_in(username: str) -> None:
        Browser(oidc, app_port).sign_in(username, f"{username}-pw")
    return sign_in


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def create_space(client, name="orders"):
    return client.post("/api/v1/tenants/acme/addressspaces/", space_manifest(name), format="json")


def tampered(token: str) -> str:
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["groups"] = ["/tenants/acme/owner"]
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{forged}.{signature}"


def test_a_token_from_the_provider_acts_as_the_signed_in_user(oidc, acme, sign_in):
    sign_in("alice")
    token = oidc.login("alice", "alice-pw")["access_token"]

    response = create_space(bearer(token))

    assert response.status_code == 201, response.content
    assert Membership.objects.get(tenant=acme, user__username="alice").role == "admin"
    event = ConfigEvent.objects.filter(type="address_space.created").get()
    assert event.actor == "oidc:maas:alice"


def test_a_token_of_someone_who_never_signed_in_gets_401_and_creates_nothing(oidc, acme):
    token = oidc.login("root", "root-pw")["access_token"]
    events, users = ConfigEvent.objects.count(), get_user_model().objects.count()

    response = bearer(token).get("/api/v1/tenants/acme/")

    assert response.status_code == 401
    assert response.json()["code"] == "sign_in_required"
    assert "sign in once" in response.json()["message"]
    assert "not signed in to MaaS yet" in response["WWW-Authenticate"]
    assert (ConfigEvent.objects.count(), get_user_model().objects.count()) == (events, users)
    assert not OidcIdentity.objects.filter(subject="root").exists()


def test_after_a_sign_in_the_token_carries_the_staff_flag(oidc, acme, sign_in):
    sign_in("root")
    token = oidc.login("root", "root-pw")["access_token"]

    response = bearer(token).get("/api/v1/tenants/acme/")

    assert response.status_code == 200
    assert get_user_model().objects.get(username="root").is_staff
    assert OidcIdentity.objects.get(subject="root").issuer == oidc.issuer


def test_a_token_without_groups_changes_no_role_and_only_a_sign_in_does(oidc, acme, sign_in):
    """A minimal RFC 9068 access token (no groups, no roles) is no evidence that a group was
    removed: memberships and the staff flag follow the claims of sign-ins only."""
    alice = {"username": "alice", "password": "alice-pw", "groups": ["/tenants/acme/admin"],
             "roles": ["maas-operator"]}
    others = [u for u in USERS if u["username"] != "alice"]
    oidc.set_users([alice, *others])
    try:
        sign_in("alice")
        minimal = oidc.sign({"sub": "alice", "client_id": "maas", "jti": "j-1"})
        response = create_space(bearer(minimal))
        kept = (Membership.objects.get(tenant=acme, user__username="alice").role,
                get_user_model().objects.get(username="alice").is_staff)
        removed_by_token = ConfigEvent.objects.filter(type="tenant.member_removed").count()
        oidc.set_users([{**alice, "groups": [], "roles": []}, *others])
        sign_in("alice")
    finally:
        oidc.set_users(USERS)

    assert response.status_code == 201, response.content
    assert kept == ("admin", True)
    assert removed_by_token == 0
    assert not Membership.objects.filter(tenant=acme, user__username="alice").exists()
    assert not get_user_model().objects.get(username="alice").is_staff
    assert ConfigEvent.objects.get(type="tenant.member_removed").actor == "oidc-claims:alice"


SERVICE_TOKENS = {
    "sub_is_client_id": {"sub": "maas", "client_id": "maas"},
    "sub_is_azp_without_user_claims": {"sub": "reporting", "azp": "reporting", "aud": "maas"},
}


@pytest.mark.parametrize("case", sorted(SERVICE_TOKENS))
def test_a_client_credentials_token_is_a_service_without_a_role(oidc, acme, case):
    token = oidc.sign(SERVICE_TOKENS[case])
    events, users = ConfigEvent.objects.count(), get_user_model().objects.count()

    response = create_space(bearer(token))

    assert response.status_code == 403
    assert response.json()["code"] == "service_account_without_role"
    assert "service account has no tenant role unless one is granted" in (
        response.json()["message"])
    assert (ConfigEvent.objects.count(), get_user_model().objects.count()) == (events, users)
    assert not OidcIdentity.objects.exists()
    assert not AddressSpace.objects.exists()


def test_keys_are_fetched_once_not_per_request(oidc, acme, sign_in):
    sign_in("alice")
    client = bearer(oidc.login("alice", "alice-pw")["access_token"])
    jwks_cache.forget()
    before = oidc.jwks_fetches()

    codes = [client.get("/api/v1/tenants/acme/addressspaces/").status_code for _ in range(5)]

    assert codes == [200] * 5
    assert oidc.jwks_fetches() - before == 1


def test_a_rotated_key_is_picked_up_with_one_refresh(oidc, acme, settings, sign_in):
    sign_in("alice")
    settings.MAAS_OIDC_JWKS_MIN_REFRESH = 0
    first = oidc.keys
    assert bearer(oidc.sign({"sub": "alice"})).get("/api/v1/tenants/").status_code == 200
    new_jwk, new_private = new_key("realm-key-2")
    oidc.rotate([new_jwk, *first])
    before = oidc.jwks_fetches()
    try:
        token = oidc.sign({"sub": "alice", "preferred_username": "alice",
                           "groups": ["/tenants/acme/admin"]}, key=new_private, kid="realm-key-2")
        responses = [bearer(token).get("/api/v1/tenants/acme/").status_code for _ in range(3)]
    finally:
        oidc.rotate(first)

    assert responses == [200, 200, 200]
    assert oidc.jwks_fetches() - before == 1


BAD_TOKENS = {
    "expired": ({"exp": int(time.time()) - 600, "iat": int(time.time()) - 900},
                "token_expired", "expired"),
    "not_yet_valid": ({"nbf": int(time.time()) + 600}, "token_not_yet_valid", "not valid yet"),
    "wrong_audience": ({"aud": "other-api", "azp": "other-client"}, "wrong_audience",
                       "not for maas"),
    "wrong_issuer": ({"iss": "http://127.0.0.1:9/realms/other"}, "wrong_issuer",
                     "not issued by"),
}


@pytest.mark.parametrize("case", sorted(BAD_TOKENS))
def test_a_bad_token_gets_401_with_its_reason_and_changes_nothing(oidc, acme, case):
    claims, code, words = BAD_TOKENS[case]
    token = oidc.sign({"sub": "mallory", "preferred_username": "mallory",
                       "groups": ["/tenants/acme/owner"], **claims})
    events, users = ConfigEvent.objects.count(), get_user_model().objects.count()

    response = create_space(bearer(token))

    assert response.status_code == 401
    assert response.json()["code"] == code
    assert words in response.json()["message"]
    assert response["WWW-Authenticate"].startswith('Bearer realm="maas", error="invalid_token"')
    assert words in response["WWW-Authenticate"]
    assert (ConfigEvent.objects.count(), get_user_model().objects.count()) == (events, users)
    assert not AddressSpace.objects.exists()


def test_a_tampered_token_gets_401_and_changes_nothing(oidc, acme):
    token = tampered(oidc.login("vic", "vic-pw")["access_token"])
    events = ConfigEvent.objects.count()

    response = create_space(bearer(token))

    assert response.status_code == 401
    assert response.json()["code"] == "bad_signature"
    assert "signature does not verify" in response.json()["message"]
    assert ConfigEvent.objects.count() == events
    assert not Membership.objects.filter(user__username="vic").exists()


def test_a_token_signed_by_an_unknown_key_gets_401_after_one_refresh(oidc, acme, settings,
                                                                    sign_in):
    sign_in("alice")
    settings.MAAS_OIDC_JWKS_MIN_REFRESH = 0
    assert bearer(oidc.sign({"sub": "alice"})).get("/api/v1/tenants/").status_code == 200
    _, rogue = new_key("rogue")
    before = oidc.jwks_fetches()

    response = create_space(bearer(oidc.sign({"sub": "mallory"}, key=rogue, kid="rogue")))

    assert response.status_code == 401
    assert response.json()["code"] == "unknown_key"
    assert "'rogue'" in response.json()["message"]
    assert oidc.jwks_fetches() - before == 1
    assert not AddressSpace.objects.exists()


def test_a_personal_access_token_still_works_beside_the_provider(oidc, acme):
    response = create_space(client_for(get_user_model().objects.get(username="founder")))

    assert response.status_code == 201
    assert ConfigEvent.objects.filter(type="address_space.created").get().actor.startswith(
        "token:default:founder")


def test_without_a_provider_a_jwt_is_refused_with_the_reason(db, settings):
    settings.MAAS_OIDC_ISSUER = ""

    response = bearer("eyJhbGciOiJSUzI1NiJ9.e30.c2ln").get("/api/v1/tenants/")

    assert response.status_code == 401
    assert response.json()["code"] == "oidc_not_configured"
