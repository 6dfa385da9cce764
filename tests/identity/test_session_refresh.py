"""A browser session from a provider sign-in checks back with the real provider when its access
token expires: it goes on and follows changed groups while the provider agrees, ends when the
provider signed the person out or disabled them, and survives a short provider outage.

Time is moved on by setting the session's refresh time to the past, not by waiting."""
import html
import re
import time
import urllib.parse

import pytest
import requests
from django.contrib.sessions.backends.db import SessionStore
from django.test import Client

from tenants.identity import config as identity_config
from tenants.models import Membership
from tenants.services import create_tenant
from tests.conftest import CTX, make_user
from tests.identity.conftest import USERS


class Browser:
    """MaaS through Django's test client (on the host the provider redirects to) and the
    provider through a requests session: the two cookie jars a browser would have."""

    def __init__(self, provider, app_port: int):
        self.provider = provider
        self.host = f"127.0.0.1:{app_port}"
        self.maas = Client(HTTP_HOST=self.host)
        self.idp = requests.Session()

    def sign_in(self, username: str, password: str) -> None:
        start = self.maas.get("/oidc/authenticate/")
        assert start.status_code == 302, start.content
        response = self.idp.get(start["Location"], allow_redirects=False)
        login_url = urllib.parse.urljoin(self.provider.origin, response.headers["Location"])
        response = self.idp.post(login_url, data={"username": username, "password": password},
                                 allow_redirects=False)
        callback = f"http://{self.host}/oidc/callback/"
        while not response.headers["Location"].startswith(callback):
            response = self.idp.get(
                urllib.parse.urljoin(self.provider.origin, response.headers["Location"]),
                allow_redirects=False)
        done = self.maas.get(response.headers["Location"].removeprefix(f"http://{self.host}"))
        assert done.status_code == 302 and "/oidc/" not in done["Location"], done["Location"]

    def session(self) -> SessionStore:
        return SessionStore(self.maas.cookies["sessionid"].value)

    def expire_access_token(self, **more) -> None:
        """As if the access token's lifetime had passed."""
        store = self.session()
        store["oidc_refresh_at"] = time.time() - 1
        store.update(more)
        store.save()

    def role_in(self, slug: str) -> str | None:
        """The role /accounts/me/ shows, or None when the session is gone."""
        page = self.maas.get("/accounts/me/")
        if page.status_code != 200:
            return None
        match = re.search(rf'data-tenant="{slug}"><td>[^<]*</td><td class="role">(\w+)',
                          page.content.decode())
        return match and match.group(1)

    def sign_out_at_provider(self) -> None:
        """What a sign-out in another application of the realm does: ends the SSO session."""
        discovery = self.idp.get(f"{self.provider.issuer}/.well-known/openid-configuration").json()
        page = self.idp.get(discovery["end_session_endpoint"], params={"client_id": "maas"})
        form = re.search(r'<form[^>]*action="([^"]+)"(.*?)</form>', page.text, re.S)
        fields = dict(re.findall(r'name="([^"]+)" value="([^"]*)"', form.group(2)))
        response = self.idp.post(urllib.parse.urljoin(self.provider.origin,
                                                      html.unescape(form.group(1))),
                                 data={**fields, "logout": "yes"}, allow_redirects=False)
        assert response.status_code in (200, 302, 303), response.text


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
