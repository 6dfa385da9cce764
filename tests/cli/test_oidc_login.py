"""`maasctl login` with the OpenID provider (the Keycloak-like test provider, a public native
client `maasctl`): the device flow (RFC 8628) and the browser flow (authorization code with
PKCE on a loopback redirect), then API calls with the provider's token, renewed by its refresh
token once it expires."""
import html
import json
import re
import sys
import time
import urllib.parse
from pathlib import Path

import pytest
import requests

from tenants import default_plans
from tenants.identity import config as identity_config
from tenants.identity.jwks import keys as jwks_cache
from tenants.models import AddressPlan, AddressSpacePlan
from tenants.services import create_tenant
from tests.conftest import CTX, free_tcp_port, make_user
from tests.identity.conftest import CLIENT_ID, CLIENT_SECRET, Browser, Provider

from .conftest import DATA, Maasctl, ok

pytestmark = pytest.mark.slow

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
TOKEN_TTL = 3  # seconds: short, so that the test sees a token expire and be renewed


class CliProvider(Provider):
    """The test provider with maasctl's client: public (no secret), native (any loopback
    port), allowed the device and authorization code grants and refresh tokens."""

    def write_config(self) -> None:
        super().write_config()
        config = json.loads(self.config_path.read_text())
        config["accessTokenTTL"] = TOKEN_TTL
        config["clients"].append({
            "client_id": "maasctl", "token_endpoint_auth_method": "none",
            "application_type": "native", "redirect_uris": ["http://127.0.0.1/callback"],
            "grant_types": [DEVICE_GRANT, "authorization_code", "refresh_token"],
            "response_types": ["code"]})
        self.config_path.write_text(json.dumps(config))


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    p = CliProvider(tmp_path_factory.mktemp("oidc-cli"), f"http://127.0.0.1:{free_tcp_port()}")
    p.start()
    yield p
    p.stop()


@pytest.fixture
def alice(provider, settings, transactional_db):
    """MaaS trusting the provider; alice (admin of acme by her groups) signed in once."""
    settings.MAAS_OIDC_ISSUER = provider.issuer
    settings.MAAS_OIDC_CLIENT_ID = CLIENT_ID
    settings.MAAS_OIDC_CLIENT_SECRET = CLIENT_SECRET
    settings.MAAS_OIDC_LEEWAY = 0
    identity_config.forget()
    jwks_cache.forget()
    default_plans.install(AddressPlan, AddressSpacePlan)
    create_tenant(ctx=CTX, slug="acme", owner=make_user("founder"))
    Browser(provider, int(provider.app_url.rsplit(":", 1)[1])).sign_in("alice", "alice-pw")
    yield
    identity_config.forget()
    jwks_cache.forget()


def first_form(page: str) -> tuple[str, dict]:
    """The action and the named inputs' values of a page's first form (the provider's pages:
    code input, confirmation, the self-submitting callback)."""
    form = re.search(r'<form[^>]*action="([^"]+)"(.*?)</form>', page, re.S)
    assert form, page
    fields = {}
    for tag in re.findall(r"<input\b[^>]*>", form.group(2), re.S):
        name, value = re.search(r'name="([^"]*)"', tag), re.search(r'value="([^"]*)"', tag)
        if name:
            fields[name.group(1)] = html.unescape(value.group(1)) if value else ""
    return html.unescape(form.group(1)), fields


def approve_device(link: str, username: str, password: str) -> None:
    """What the person does with the link maasctl prints: confirm the code, sign in."""
    idp = requests.Session()
    response = idp.get(link, allow_redirects=False)
    trail = []
    for _ in range(20):
        trail.append((response.status_code, response.headers.get("Location"),
                      response.text[:300]))
        if response.status_code in (302, 303):
            target = urllib.parse.urljoin(link, response.headers["Location"])
            if "/login/" in target:
                response = idp.post(target, data={"username": username, "password": password},
                                    allow_redirects=False)
            else:
                response = idp.get(target, allow_redirects=False)
            continue
        assert response.status_code == 200, response.text
        if "Sign-in Success" in response.text:
            return
        action, fields = first_form(response.text)
        response = idp.post(urllib.parse.urljoin(link, action), data=fields,
                            allow_redirects=False)
    raise AssertionError(f"the device sign-in did not finish: {trail}")


def test_it_signs_in_by_the_device_flow_and_renews_the_token(alice, provider, live_server,
                                                            tmp_path):
    cli = Maasctl(tmp_path / "config.json", live_server.url)
    proc = cli.popen("login", "--url", live_server.url, "--issuer", provider.issuer,
                     "--client-id", "maasctl")
    first = proc.stderr.readline()
    assert first.startswith("To sign in, open "), first + proc.stderr.read()
    link = first.removeprefix("To sign in, open ").strip()
    assert "enter the code" in proc.stderr.readline()
    approve_device(link, "alice", "alice-pw")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.splitlines() == [f"Logged in to {live_server.url} (tenants: acme).",
                                'Current tenant: "acme".']
    saved = json.loads(Path(cli.env["MAASCTL_CONFIG"]).read_text())
    assert saved["oidc"]["client_id"] == "maasctl" and saved["oidc"]["refresh_token"]

    assert ok(cli("apply", "-f", str(DATA / "brokered.yaml"))).splitlines()[0] == \
        "addressspace.enmasse.io/mybrokered created"
    time.sleep(TOKEN_TTL + 1)  # the access token has expired: maasctl renews it and goes on
    assert "mybrokered" in ok(cli("get", "as"))
    renewed = json.loads(Path(cli.env["MAASCTL_CONFIG"]).read_text())
    assert renewed["token"] != saved["token"]


def test_it_signs_in_in_a_browser_with_pkce(alice, provider, live_server, tmp_path):
    cli = Maasctl(tmp_path / "config.json", live_server.url)
    cli.env.update(BROWSER=f"{sys.executable} {Path(__file__).with_name('browser.py')} %s",
                   MAASCTL_TEST_USERNAME="alice", MAASCTL_TEST_PASSWORD="alice-pw")
    out = ok(cli("login", "--url", live_server.url, "--issuer", provider.issuer,
                 "--client-id", "maasctl", "--browser"))
    assert 'Current tenant: "acme".' in out
    assert ok(cli("get", "tenants", "-o", "name")) == "tenant.maas.io/acme\n"


def test_a_refused_sign_in_exits_1_and_saves_nothing(alice, provider, live_server, tmp_path):
    cli = Maasctl(tmp_path / "config.json", live_server.url)
    proc = cli.popen("login", "--url", live_server.url, "--issuer", provider.issuer,
                     "--client-id", "maasctl")
    link = proc.stderr.readline().removeprefix("To sign in, open ").strip()
    idp = requests.Session()
    action, fields = first_form(idp.get(link).text)  # the code, submitted by script
    page = idp.post(urllib.parse.urljoin(link, action), data=fields)
    action, fields = first_form(page.text)  # the confirmation: abort instead
    idp.post(urllib.parse.urljoin(link, action), data={**fields, "abort": "yes"})
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "sign-in failed: access_denied" in err
    assert not Path(cli.env["MAASCTL_CONFIG"]).exists()
