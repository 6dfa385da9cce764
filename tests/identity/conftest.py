"""A real OpenID Connect provider for the identity tests: panva's oidc-provider set up like a
Keycloak realm (deploy/local/oidc/provider.mjs), on a free port, issuer /realms/maas, with test
users, groups and realm roles, JWT access tokens and a password login page."""
import base64
import hashlib
import html
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse

import jwt
import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import rsa
from django.conf import settings
from django.contrib.sessions.backends.db import SessionStore
from django.test import Client
from jwt.algorithms import RSAAlgorithm
from pytest_django.live_server_helper import LiveServer

from tenants.identity import config as identity_config
from tenants.identity.jwks import keys as jwks_cache
from tests.conftest import wait_for

PROVIDER_DIR = settings.BASE_DIR / "deploy" / "local" / "oidc"
CLIENT_ID, CLIENT_SECRET = "maas", "maas-test-secret"

USERS = [
    {"username": "alice", "password": "alice-pw", "groups": ["/tenants/acme/admin"]},
    {"username": "olga", "password": "olga-pw", "groups": [], "roles": ["tenant:acme:owner"]},
    {"username": "vic", "password": "vic-pw", "groups": ["/tenants/acme/viewer", "/other/x"]},
    {"username": "root", "password": "root-pw", "roles": ["maas-operator"]},
    {"username": "nina", "password": "nina-pw", "groups": []},  # in no tenant until invited
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def new_key(kid: str) -> tuple[dict, object]:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(RSAAlgorithm.to_jwk(private))
    jwk.update(kid=kid, use="sig", alg="RS256")
    jwk.pop("key_ops", None)
    return jwk, private


def ensure_node_modules() -> None:
    if (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir():
        return
    npm = shutil.which("npm")
    assert npm, "npm is needed for the test OIDC provider (apt-get install nodejs npm)"
    subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=PROVIDER_DIR, check=True,
                   capture_output=True, timeout=300)


class Provider:
    """The provider process and what the tests need from it (the harness interface that
    tests/identity/dot.py's DotProvider offers too)."""

    name = "keycloak"
    client_id, client_secret = CLIENT_ID, CLIENT_SECRET

    def __init__(self, workdir, app_url: str, *, token_format: str = "jwt",
                 end_session: bool = True, users: list[dict] = USERS):
        self.token_format, self.end_session = token_format, end_session
        self.port = free_port()
        self.origin = f"http://127.0.0.1:{self.port}"
        self.issuer = f"{self.origin}/realms/maas"
        self.app_url = app_url
        self.redirect_uri = f"{app_url}/oidc/callback/"
        self.config_path = workdir / "realm.json"
        self.log_path = workdir / "provider.log"
        self.jwk, self.private_key = new_key("realm-key-1")
        self.keys = [self.jwk]
        self.users = users
        self.proc = None

    def write_config(self) -> None:
        config = {
            "port": self.port, "issuer": self.issuer, "realm": "maas", "audience": CLIENT_ID,
            "jwks": {"keys": self.keys},
            "clients": [{"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET,
                         "redirect_uris": [self.redirect_uri],
                         "post_logout_redirect_uris": [f"{self.app_url}/accounts/signed-out/"]}],
            "users": self.users, "accessTokenFormat": self.token_format,
            "endSession": self.end_session,
        }
        self.config_path.write_text(json.dumps(config))

    def start(self) -> None:
        ensure_node_modules()
        self.write_config()
        self.log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(["node", "provider.mjs", str(self.config_path)],
                                     cwd=PROVIDER_DIR, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        wait_for(lambda: "listening" in self.log_path.read_text(), 30, what="OIDC provider")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        self.log.close()

    def rotate(self, keys: list[dict]) -> None:
        """Serves another key set."""
        self.keys = keys
        self.reload()

    def rotate_keys(self) -> None:
        """A new active key; the old one stays published, so tokens signed with it verify."""
        self.jwk, self.private_key = new_key(f"realm-key-{len(self.keys) + 1}")
        self.rotate([self.jwk, *self.keys])  # oidc-provider signs with the first key

    def set_end_session(self, enabled: bool) -> None:
        self.end_session = enabled
        self.reload()

    def revoke(self, token: str) -> None:
        """RFC 7009 at the provider, as the client."""
        discovery = requests.get(f"{self.issuer}/.well-known/openid-configuration").json()
        response = requests.post(discovery["revocation_endpoint"], data={
            "token": token, "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET})
        if "Structured JWT Tokens cannot be revoked" in response.text:
            return  # oidc-provider, like many providers, revokes only what it keeps
        assert response.status_code == 200, response.text

    def requests_to(self, fragment: str) -> int:
        """How many requests the provider served whose path contains fragment."""
        return sum(1 for line in self.log_path.read_text().splitlines()
                   if line.split(" ")[0] in ("GET", "POST") and fragment in line)

    def authorize(self, idp: requests.Session, authorize_url: str, username: str, password: str,
                  callback_prefix: str) -> str:
        """Signs in on the login page the authorize URL leads to; the redirect to the client."""
        response = idp.get(authorize_url, allow_redirects=False)
        if response.headers["Location"].startswith(callback_prefix):
            return response.headers["Location"]  # still signed in at the provider (SSO)
        login_url = urllib.parse.urljoin(self.origin, response.headers["Location"])
        response = idp.post(login_url, data={"username": username, "password": password},
                            allow_redirects=False)
        while not response.headers["Location"].startswith(callback_prefix):
            response = idp.get(urllib.parse.urljoin(self.origin, response.headers["Location"]),
                               allow_redirects=False)
        return response.headers["Location"]

    def set_users(self, users: list[dict]) -> None:
        """Changes the realm's users (groups, roles; a user left out is disabled)."""
        self.users = users
        self.reload()

    def reload(self) -> None:
        """SIGHUP makes the provider read its config again; its sessions and grants stay."""
        self.write_config()
        before = self.log_path.read_text().count("reloaded")
        os.kill(self.proc.pid, signal.SIGHUP)
        wait_for(lambda: self.log_path.read_text().count("reloaded") > before, 10,
                 what="provider reload")

    def jwks_fetches(self) -> int:
        return sum(1 for line in self.log_path.read_text().splitlines()
                   if line.startswith("GET /realms/maas/jwks"))

    def sign(self, claims: dict, *, key=None, kid: str | None = None,
             headers: dict | None = None) -> str:
        """A token signed with the realm's own key (or another one), for the cases the provider
        would never issue itself: expired, not yet valid, another audience or issuer."""
        now = int(time.time())
        body = {"iss": self.issuer, "aud": CLIENT_ID, "azp": CLIENT_ID, "iat": now,
                "exp": now + 300, "typ": "Bearer", **claims}
        return jwt.encode(body, key or self.private_key, algorithm="RS256",
                          headers={"kid": kid or self.jwk["kid"], **(headers or {})})

    def login(self, username: str, password: str, scope: str = "openid email profile") -> dict:
        """The authorization code flow with PKCE, as a browser would do it, without a browser:
        returns the token response (access_token, id_token)."""
        session = requests.Session()
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(
            hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        discovery = session.get(f"{self.issuer}/.well-known/openid-configuration").json()
        response = session.get(discovery["authorization_endpoint"], allow_redirects=False, params={
            "client_id": CLIENT_ID, "response_type": "code", "scope": scope,
            "redirect_uri": self.redirect_uri, "state": "s", "nonce": "n",
            "code_challenge": challenge, "code_challenge_method": "S256"})
        login_url = urllib.parse.urljoin(self.origin, response.headers["Location"])
        assert "/realms/maas/login/" in login_url
        response = session.post(login_url, data={"username": username, "password": password},
                                allow_redirects=False)
        while not response.headers["Location"].startswith(self.redirect_uri):
            response = session.get(urllib.parse.urljoin(self.origin, response.headers["Location"]),
                                   allow_redirects=False)
        code = urllib.parse.parse_qs(urllib.parse.urlsplit(response.headers["Location"]).query)
        tokens = session.post(discovery["token_endpoint"], data={
            "grant_type": "authorization_code", "code": code["code"][0],
            "redirect_uri": self.redirect_uri, "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET, "code_verifier": verifier})
        assert tokens.status_code == 200, tokens.text
        return tokens.json()


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
        callback = self.provider.authorize(self.idp, start["Location"], username, password,
                                           f"http://{self.host}/oidc/callback/")
        done = self.maas.get(callback.removeprefix(f"http://{self.host}"))
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


@pytest.fixture(scope="session")
def app_port() -> int:
    """A port below Linux's ephemeral range (32768-60999): the provider registers it long before
    the app server binds it, and a port of that range can meanwhile be taken by any outgoing
    connection of the machine (seen once: Errno 98 at the app server's start)."""
    for port in random.sample(range(20000, 30000), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return free_port()


@pytest.fixture(scope="session")
def oidc_provider(tmp_path_factory, app_port):
    provider = Provider(tmp_path_factory.mktemp("oidc"), f"http://127.0.0.1:{app_port}")
    provider.start()
    yield provider
    provider.stop()


@pytest.fixture
def oidc(oidc_provider, settings):
    """Django configured for the provider, with empty key and discovery caches."""
    settings.MAAS_OIDC_ISSUER = oidc_provider.issuer
    settings.MAAS_OIDC_CLIENT_ID = CLIENT_ID
    settings.MAAS_OIDC_CLIENT_SECRET = CLIENT_SECRET
    identity_config.forget()
    jwks_cache.forget()
    yield oidc_provider
    identity_config.forget()
    jwks_cache.forget()


@pytest.fixture(scope="session")
def app_server(django_db_setup, django_db_blocker, app_port):
    """MaaS served on the port registered with the provider (the callback URL is fixed)."""
    with django_db_blocker.unblock():
        server = LiveServer(f"127.0.0.1:{app_port}")
    yield server
    server.stop()
