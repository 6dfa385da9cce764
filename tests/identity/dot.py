"""The django-oauth-toolkit provider process (tests/identity/dot_provider) behind the same
harness interface as conftest.Provider: started with its own SQLite database in `workdir`,
restarted (same database) to rotate keys or switch RP-initiated logout."""
import base64
import hashlib
import html
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.parse

import jwt
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.conf import settings
from jwcrypto import jwk

from tests.conftest import wait_for

from .conftest import CLIENT_ID, CLIENT_SECRET, USERS, free_port


def new_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


class DotProvider:
    name = "dot"
    client_id, client_secret = CLIENT_ID, CLIENT_SECRET

    def __init__(self, workdir, app_url: str, *, token_format: str = "jwt",
                 end_session: bool = True, users: list[dict] = USERS):
        self.workdir, self.app_url = workdir, app_url
        self.token_format, self.end_session, self.users = token_format, end_session, users
        self.port = free_port()
        self.origin = f"http://127.0.0.1:{self.port}"
        self.issuer = f"{self.origin}/o"
        self.redirect_uri = f"{app_url}/oidc/callback/"
        self.keys = [new_pem()]
        self.config_path = workdir / "dot.json"
        self.log_path = workdir / "requests.log"
        self.out_path = workdir / "provider.out"
        self.proc = None

    # -- the process ------------------------------------------------------------------------

    def write_config(self) -> None:
        self.config_path.write_text(json.dumps({
            "issuer": self.issuer, "database": str(self.workdir / "dot.sqlite3"),
            "request_log": str(self.log_path), "keys": self.keys,
            "token_format": self.token_format, "end_session": self.end_session,
            "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET,
            "redirect_uri": self.redirect_uri,
            "post_logout_redirect_uri": f"{self.app_url}/accounts/signed-out/",
            "api_audience": f"{self.app_url}/api/", "users": self.users,
        }))

    def _manage(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "django", *args]

    def _env(self) -> dict:
        return dict(os.environ, DJANGO_SETTINGS_MODULE="tests.identity.dot_provider.settings",
                    DOT_CONFIG=str(self.config_path), PYTHONPATH=str(settings.BASE_DIR))

    def _run(self, *args: str) -> None:
        done = subprocess.run(self._manage(*args), env=self._env(), cwd=settings.BASE_DIR,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr

    def start(self) -> None:
        self.write_config()
        self._run("migrate", "--noinput", "-v", "0")
        self._run("seed")
        self.out = open(self.out_path, "a")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            self._manage("runserver", "--noreload", "--skip-checks", f"127.0.0.1:{self.port}"),
            env=self._env(), cwd=settings.BASE_DIR, stdout=self.out, stderr=subprocess.STDOUT,
            start_new_session=True)
        wait_for(self._answers, 30, interval=0.2, what="the DOT provider")

    def _answers(self) -> bool:
        try:
            return requests.get(f"{self.issuer}/.well-known/openid-configuration",
                                timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        if self.proc:
            self.out.close()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    # -- what tests change --------------------------------------------------------------------

    def rotate_keys(self) -> None:
        """A new active key; the old ones stay in the JWKS (OIDC_RSA_PRIVATE_KEYS_INACTIVE)."""
        self.keys = [new_pem(), *self.keys]
        self.restart()

    def set_end_session(self, enabled: bool) -> None:
        self.end_session = enabled
        self.restart()

    def set_users(self, users: list[dict]) -> None:
        self.users = users
        self.write_config()
        self._run("seed")

    def requests_to(self, fragment: str) -> int:
        if not self.log_path.exists():
            return 0
        return sum(1 for line in self.log_path.read_text().splitlines()
                   if fragment in line.split(" ", 1)[-1])

    # -- what tests do at the provider ---------------------------------------------------------

    def discovery(self) -> dict:
        return requests.get(f"{self.issuer}/.well-known/openid-configuration").json()

    def authorize(self, idp: requests.Session, authorize_url: str, username: str, password: str,
                  callback_prefix: str) -> str:
        """Follows the authorize URL to Django's login form, signs in, and follows the
        redirects until the one to the client's callback."""
        url = authorize_url
        for _ in range(10):
            response = idp.get(url, allow_redirects=False)
            location = response.headers.get("Location", "")
            if location.startswith(callback_prefix):
                return location
            if response.status_code in (301, 302, 303):
                url = urllib.parse.urljoin(url, location)
                continue
            assert response.status_code == 200 and 'name="password"' in response.text, (
                response.status_code, response.text[:500])
            fields = {name: html.unescape(value) for name, value in re.findall(
                r'name="(csrfmiddlewaretoken|next)" value="([^"]*)"', response.text)}
            response = idp.post(url, data={**fields, "username": username,
                                           "password": password},
                                headers={"Referer": url}, allow_redirects=False)
            assert response.status_code == 302, response.text[:500]
            url = urllib.parse.urljoin(url, response.headers["Location"])
        raise AssertionError("no redirect to the client after signing in")

    def login(self, username: str, password: str, scope: str = "openid email profile") -> dict:
        """The authorization code flow with PKCE, as a browser would do it, without a browser."""
        session = requests.Session()
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(
            hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        discovery = self.discovery()
        query = urllib.parse.urlencode({
            "client_id": CLIENT_ID, "response_type": "code", "scope": scope,
            "redirect_uri": self.redirect_uri, "state": "s", "nonce": "n",
            "code_challenge": challenge, "code_challenge_method": "S256"})
        callback = self.authorize(session, f"{discovery['authorization_endpoint']}?{query}",
                                  username, password, self.redirect_uri)
        code = urllib.parse.parse_qs(urllib.parse.urlsplit(callback).query)["code"][0]
        tokens = session.post(discovery["token_endpoint"], data={
            "grant_type": "authorization_code", "code": code, "redirect_uri": self.redirect_uri,
            "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET, "code_verifier": verifier})
        assert tokens.status_code == 200, tokens.text
        return tokens.json()

    def revoke(self, token: str) -> None:
        response = requests.post(f"{self.issuer}/revoke_token/", data={
            "token": token, "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET})
        assert response.status_code == 200, response.text

    def sign(self, claims: dict, *, key=None, kid: str | None = None,
             headers: dict | None = None) -> str:
        """A token signed with the active key (or `key`) under its JWKS kid."""
        now = int(time.time())
        body = {"iss": self.issuer, "aud": CLIENT_ID, "iat": now, "exp": now + 300, **claims}
        body = {k: v for k, v in body.items() if v is not None}
        pem = self.keys[0]
        kid = kid or jwk.JWK.from_pem(pem.encode()).thumbprint()
        return jwt.encode(body, key or pem, algorithm="RS256", headers={"kid": kid, **(headers or {})})
