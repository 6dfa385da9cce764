"""A browser session from a provider sign-in checks back with the real provider when its access
token expires: it goes on and follows changed groups while the provider agrees, ends when the
provider signed the person out or disabled them, and survives a short provider outage.

Time is moved on by setting the session's refresh time to the past, not by waiting."""
import time

import pytest

from tenants.identity import config as identity_config
from tenants.models import Membership
from tenants.services import create_tenant
from tests.conftest import CTX, make_user
from tests.identity.conftest import USERS, Browser


@pytest.fixture
def acme(db):
    return create_tenant(ctx=CTX, slug="acme", owner=make_user("founder"))


@pytest.fixture
def browser(oidc, app_port, acme, redis_server):  # Redis: the refresh lock is real
    yield Browser(oidc, app_port)
    oidc.set_users(USERS)  # the realm as the other tests expect it


def test_the_session_goes_on_with_new_tokens_and_follows_changed_groups(browser, oidc):
    browser.sign_in("alice", "alice-pw")
    assert browser.role_in("acme") == "admin"
    first = dict(browser.session())
    assert first["oidc_refresh_token"]

    oidc.set_users([{**u, "groups": ["/tenants/acme/viewer"]} if u["username"] == "alice" else u
                    for u in USERS])
    browser.expire_access_token()
    assert browser.role_in("acme") == "viewer"  # applied at the refresh, not the next sign-in
    after = browser.session()
    assert after["oidc_refresh_at"] > time.time()
    assert after["oidc_id_token"] != first["oidc_id_token"]
    assert Membership.objects.get(tenant__slug="acme", user__username="alice").role == "viewer"

    # Until the access token expires again, nothing is asked of the provider.
    grants = oidc.log_path.read_text().count("POST /realms/maas/token")
    for _ in range(3):
        assert browser.role_in("acme") == "viewer"
    assert oidc.log_path.read_text().count("POST /realms/maas/token") == grants


def test_a_sign_out_at_the_provider_ends_the_session_here(browser):
    browser.sign_in("alice", "alice-pw")
    assert browser.role_in("acme") == "admin"
    browser.sign_out_at_provider()
    assert browser.role_in("acme") == "admin"  # the access token has not expired yet
    browser.expire_access_token()
    response = browser.maas.get("/accounts/me/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert browser.maas.get("/api/v1/tenants/acme/").status_code in (401, 403)


def test_a_user_disabled_at_the_provider_is_signed_out_and_htmx_is_sent_to_sign_in(browser,
                                                                                      oidc):
    browser.sign_in("alice", "alice-pw")
    oidc.set_users([u for u in USERS if u["username"] != "alice"])
    browser.expire_access_token()
    response = browser.maas.get("/portal/t/acme/", HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and response["HX-Redirect"] == "/accounts/login/"
    assert browser.role_in("acme") is None


def test_an_unreachable_provider_is_tolerated_for_the_grace_time_only(browser, settings):
    browser.sign_in("alice", "alice-pw")
    document = identity_config.discovery()
    real = document["token_endpoint"]
    document["token_endpoint"] = "http://127.0.0.1:9/token"  # nothing answers there
    try:
        browser.expire_access_token()
        assert browser.role_in("acme") == "admin"
        assert browser.session()["oidc_refresh_failing_since"] <= time.time()
        browser.expire_access_token(oidc_refresh_failing_since=time.time()
                                    - settings.MAAS_OIDC_REFRESH_GRACE - 1)
        assert browser.role_in("acme") is None
    finally:
        document["token_endpoint"] = real
