"""The identity suite against two real OpenID providers, each issuing JWT and then opaque
access tokens: the Keycloak-shaped one (oidc-provider, deploy/local/oidc) and
django-oauth-toolkit (tests/identity/dot_provider, its own process and database), which names
groups without a leading slash, roles in a flat `roles` claim, RFC 9068 access tokens whose
`aud` is the API's URL, and lists introspection only in its RFC 8414 metadata.

Per provider and format: browser sign-in and role mapping, bearer API access (and an outsider's
404), the ID and refresh tokens refused, a token without claims leaving memberships alone,
revocation, session refresh, sign-out with and without `end_session_endpoint`, rotated keys."""
import time

import jwt
import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from eventlog.models import ConfigEvent
from tenants import default_plans
from tenants.identity import config as identity_config
from tenants.identity.jwks import keys as jwks_cache
from tenants.identity.models import OidcIdentity
from tenants.models import AddressPlan, AddressSpacePlan, Membership
from tenants.services import create_tenant
from tests.conftest import CTX, make_user, space_manifest

from .conftest import USERS, Browser, Provider
from .dot import DotProvider

pytestmark = pytest.mark.slow

KINDS = {"keycloak": Provider, "dot": DotProvider}
PROVIDERS = [("keycloak", "jwt"), ("keycloak", "opaque"), ("dot", "jwt"), ("dot", "opaque")]


@pytest.fixture(scope="module", params=PROVIDERS, ids=["-".join(p) for p in PROVIDERS])
def provider(request, tmp_path_factory, app_port):
    kind, token_format = request.param
    harness = KINDS[kind](tmp_path_factory.mktemp(f"{kind}-{token_format}"),
                          f"http://127.0.0.1:{app_port}", token_format=token_format)
    harness.start()
    yield harness
    harness.stop()


@pytest.fixture
def idp(provider, settings, db):
    """MaaS configured for the provider, with empty caches, and the tenant acme."""
    settings.MAAS_OIDC_ISSUER = provider.issuer
    settings.MAAS_OIDC_CLIENT_ID = provider.client_id
    settings.MAAS_OIDC_CLIENT_SECRET = provider.client_secret
    settings.MAAS_OIDC_INTROSPECTION_CACHE = 0
    settings.MAAS_OIDC_JWKS_MIN_REFRESH = 0
    identity_config.forget()
    jwks_cache.forget()
    default_plans.install(AddressPlan, AddressSpacePlan)
    create_tenant(ctx=CTX, slug="acme", owner=make_user("founder"))
    yield provider
    identity_config.forget()
    jwks_cache.forget()


@pytest.fixture
def browser(idp, app_port):
    return Browser(idp, app_port)


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def role(username: str) -> str | None:
    found = Membership.objects.filter(tenant__slug="acme", user__username=username).first()
    return found and found.role


def test_sign_in_maps_groups_and_roles(idp, app_port):
    for name in ("alice", "olga", "vic", "root"):
        Browser(idp, app_port).sign_in(name, f"{name}-pw")

    assert (role("alice"), role("olga"), role("vic"), role("root")) == (
        "admin", "owner", "viewer", None)
    assert get_user_model().objects.get(username="root").is_staff
    assert not get_user_model().objects.get(username="alice").is_staff


def test_a_bearer_token_acts_as_the_user_and_an_outsider_gets_404(idp, browser, app_port):
    browser.sign_in("alice", "alice-pw")
    Browser(idp, app_port).sign_in("nina", "nina-pw")
    alice = bearer(idp.login("alice", "alice-pw")["access_token"])
    nina = bearer(idp.login("nina", "nina-pw")["access_token"])

    created = alice.post("/api/v1/tenants/acme/addressspaces/", space_manifest("orders"),
                         format="json")

    assert created.status_code == 201, created.content
    assert ConfigEvent.objects.get(type="address_space.created").actor.endswith(":alice")
    assert nina.get("/api/v1/tenants/acme/addressspaces/").status_code == 404


def test_the_id_token_and_the_refresh_token_are_refused(idp, browser):
    browser.sign_in("alice", "alice-pw")
    tokens = idp.login("alice", "alice-pw")

    refused = {name: bearer(tokens[name]).get("/api/v1/tenants/acme/")
               for name in ("id_token", "refresh_token")}

    for name, response in refused.items():
        assert response.status_code == 401, (name, response.content)
        assert "invalid_token" in response["WWW-Authenticate"]
    assert refused["id_token"].json()["code"] == "not_an_access_token"
    assert bearer(tokens["access_token"]).get("/api/v1/tenants/acme/").status_code == 200


def test_a_token_without_identity_claims_leaves_memberships_and_staff_alone(idp, app_port):
    for name in ("alice", "root"):
        Browser(idp, app_port).sign_in(name, f"{name}-pw")
    subjects = {name: OidcIdentity.objects.get(user__username=name).subject
                for name in ("alice", "root")}
    if idp.token_format == "jwt":  # RFC 9068's minimum: no groups, no roles, no names
        tokens = {name: idp.sign({"sub": sub, "client_id": "maas", "scope": "openid",
                                  "aud": "http://127.0.0.1/api/", "azp": None, "typ": None,
                                  "jti": f"j-{name}"}, headers={"typ": "at+jwt"})
                  for name, sub in subjects.items()}
    else:  # what introspection says of a real opaque token carries no groups either
        tokens = {name: idp.login(name, f"{name}-pw", scope="openid")["access_token"]
                  for name in subjects}
    events = ConfigEvent.objects.count()

    codes = [bearer(tokens[name]).get("/api/v1/tenants/acme/").status_code
             for name in ("alice", "root")]

    assert codes == [200, 200]
    assert role("alice") == "admin"
    assert get_user_model().objects.get(username="root").is_staff
    assert ConfigEvent.objects.count() == events


def test_revocation(idp, browser):
    """An opaque token is refused once revoked (introspection); a JWT is checked locally and
    stays good until it expires, which bounds revocation by the token's lifetime."""
    browser.sign_in("alice", "alice-pw")
    token = idp.login("alice", "alice-pw")["access_token"]
    assert bearer(token).get("/api/v1/tenants/acme/").status_code == 200

    idp.revoke(token)
    response = bearer(token).get("/api/v1/tenants/acme/")

    if idp.token_format == "opaque":
        assert response.status_code == 401
        assert response.json()["code"] == "token_inactive"
        assert "not active" in response["WWW-Authenticate"]
    else:
        assert response.status_code == 200


def test_introspection_answers_are_reused_until_the_cache_time(idp, browser, settings,
                                                              redis_server):
    browser.sign_in("alice", "alice-pw")
    token = idp.login("alice", "alice-pw")["access_token"]
    settings.MAAS_OIDC_INTROSPECTION_CACHE = 60
    before = idp.requests_to("introspect")

    codes = [bearer(token).get("/api/v1/tenants/acme/").status_code for _ in range(3)]

    assert codes == [200, 200, 200]
    assert idp.requests_to("introspect") - before == (1 if idp.token_format == "opaque" else 0)


def test_a_session_refreshes_with_new_claims_and_ends_when_the_user_is_disabled(idp, browser):
    browser.sign_in("alice", "alice-pw")
    demoted = [{**u, "groups": ["/tenants/acme/viewer"]} if u["username"] == "alice" else u
               for u in USERS]
    try:
        idp.set_users(demoted)
        browser.expire_access_token()
        after_refresh = browser.role_in("acme")
        refreshed_at = browser.session()["oidc_refresh_at"]
        idp.set_users([u for u in USERS if u["username"] != "alice"])
        browser.expire_access_token()
        after_disable = browser.role_in("acme")
    finally:
        idp.set_users(USERS)

    assert after_refresh == "viewer"
    assert refreshed_at > time.time()
    assert after_disable is None


def test_sign_out_goes_through_the_provider_and_skips_an_end_session_it_dropped(idp, browser,
                                                                                 settings):
    settings.MAAS_OIDC_DISCOVERY_MIN_REFRESH = 0
    browser.sign_in("alice", "alice-pw")
    first = browser.maas.post("/accounts/logout/")
    idp.set_end_session(False)
    try:
        browser.sign_in("alice", "alice-pw")
        second = browser.maas.post("/accounts/logout/")
    finally:
        idp.set_end_session(True)

    assert first.status_code == 302 and "id_token_hint=" in first["Location"]
    assert first["Location"].startswith(idp.origin)
    assert second.status_code == 302
    assert second["Location"].endswith("/accounts/signed-out/")
    assert browser.maas.get("/accounts/me/").status_code == 302  # signed out here


def test_rotated_keys_sign_in_and_bearer_tokens_keep_working(idp, browser, app_port):
    browser.sign_in("alice", "alice-pw")
    old = idp.login("alice", "alice-pw")

    idp.rotate_keys()
    new = idp.login("alice", "alice-pw")
    Browser(idp, app_port).sign_in("alice", "alice-pw")

    assert kid(new["id_token"]) != kid(old["id_token"])
    for tokens in (old, new):
        assert bearer(tokens["access_token"]).get("/api/v1/tenants/acme/").status_code == 200
    assert role("alice") == "admin"


def kid(token: str) -> str:
    return jwt.get_unverified_header(token)["kid"]
