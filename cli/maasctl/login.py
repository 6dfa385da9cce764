"""Signing in: a personal access token (`--token`, `--token-stdin` or a prompt), or a token of
the OpenID provider by the device flow (RFC 8628) or in a browser (authorization code with
PKCE, RFC 7636, on a loopback redirect); provider tokens are renewed with their refresh token.
"""
import base64
import getpass
import hashlib
import http.server
import secrets
import sys
import threading
import time
import urllib.parse
import webbrowser

import requests

from . import config
from .client import Client
from .errors import ApiError, CliError, Unreachable, UsageError

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


class RefreshingClient(Client):
    """A client that renews an expired provider token once (refresh token) and retries."""

    def __init__(self, cfg: config.Config):
        super().__init__(cfg.url, cfg.token)
        self.cfg = cfg

    def request(self, method, path, body=None, params=None):
        try:
            return super().request(method, path, body, params)
        except ApiError as exc:
            if exc.status != 401 or not self.cfg.oidc.get("refresh_token"):
                raise
        self._refresh()
        return super().request(method, path, body, params)

    def _refresh(self) -> None:
        oidc = self.cfg.oidc
        tokens = _token_request(oidc["token_endpoint"], {
            "grant_type": "refresh_token", "refresh_token": oidc["refresh_token"],
            "client_id": oidc["client_id"]})
        self.cfg.token = tokens["access_token"]
        oidc["refresh_token"] = tokens.get("refresh_token", oidc["refresh_token"])
        saved = config.load(env=False)
        saved.token, saved.oidc = self.cfg.token, oidc
        config.save(saved)
        self.session.headers["Authorization"] = f"Bearer {self.cfg.token}"


def client_for(cfg: config.Config) -> Client:
    return RefreshingClient(cfg) if cfg.oidc.get("refresh_token") else Client(cfg.url, cfg.token)


def _post_form(url: str, data: dict) -> requests.Response:
    try:
        return requests.post(url, data=data, timeout=30, headers={"Accept": "application/json"})
    except requests.RequestException as exc:
        raise Unreachable(f"cannot reach the OpenID provider at {url}: {exc}") from None


def _token_request(endpoint: str, data: dict) -> dict:
    response = _post_form(endpoint, data)
    body = response.json() if response.headers.get("content-type", "").startswith(
        "application/json") else {}
    if response.status_code != 200 or "access_token" not in body:
        raise CliError(f"the OpenID provider refused: {body.get('error', response.status_code)}"
                       f" {body.get('error_description', '')}".rstrip())
    return body


def discover(issuer: str) -> dict:
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=30)
        response.raise_for_status()
        return response.json()
    except requests.RequestException as exc:
        raise Unreachable(f"cannot read the OpenID provider's discovery at {url}: {exc}") \
            from None


def device_flow(meta: dict, client_id: str, scope: str) -> dict:
    endpoint = meta.get("device_authorization_endpoint")
    if not endpoint:
        raise CliError("the OpenID provider offers no device flow "
                       "(no device_authorization_endpoint): try --browser")
    response = _post_form(endpoint, {"client_id": client_id, "scope": scope})
    if response.status_code != 200:
        raise CliError(f"the OpenID provider refused the device flow: {response.text[:200]}")
    grant = response.json()
    link = grant.get("verification_uri_complete") or grant["verification_uri"]
    print(f"To sign in, open {link}\nand enter the code {grant['user_code']}",
          file=sys.stderr, flush=True)
    interval = float(grant.get("interval", 5))
    deadline = time.monotonic() + float(grant.get("expires_in", 600))
    while time.monotonic() < deadline:
        time.sleep(interval)
        response = _post_form(meta["token_endpoint"], {
            "grant_type": DEVICE_GRANT, "device_code": grant["device_code"],
            "client_id": client_id})
        body = response.json()
        if response.status_code == 200 and "access_token" in body:
            return body
        error = body.get("error")
        if error == "slow_down":
            interval += 5
        elif error != "authorization_pending":
            raise CliError(f"sign-in failed: {error} {body.get('error_description', '')}"
                           .rstrip())
    raise CliError("sign-in failed: the code expired")


def browser_flow(meta: dict, client_id: str, scope: str) -> dict:
    """Authorization code with PKCE; the provider redirects to a one-shot loopback server."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()) \
        .rstrip(b"=").decode()
    state = secrets.token_urlsafe(16)
    answer: dict = {}

    class Callback(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            answer.update(urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query))
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.end_headers()
            self.wfile.write(b"maasctl: signed in, you can close this window.\n")

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Callback)
    redirect = f"http://127.0.0.1:{server.server_port}/callback"
    url = meta["authorization_endpoint"] + "?" + urllib.parse.urlencode({
        "response_type": "code", "client_id": client_id, "redirect_uri": redirect,
        "scope": scope, "state": state, "code_challenge": challenge,
        "code_challenge_method": "S256"})
    print(f"Opening {url}\n(open it yourself if no browser starts)", file=sys.stderr,
          flush=True)
    # In a thread: a browser command may not return before the redirect reaches the server.
    threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
    server.timeout = 300
    server.handle_request()
    server.server_close()
    if answer.get("state", [""])[0] != state or "code" not in answer:
        raise CliError(f"sign-in failed: {answer.get('error', ['no code returned'])[0]}")
    return _token_request(meta["token_endpoint"], {
        "grant_type": "authorization_code", "code": answer["code"][0],
        "redirect_uri": redirect, "client_id": client_id, "code_verifier": verifier})


def login(args) -> None:
    cfg = config.load(env=False)
    cfg.url = (getattr(args, "url", None) or cfg.url).rstrip("/")
    if not cfg.url:
        raise UsageError("give --url, the MaaS API (e.g. https://maas.example.com)")
    token = getattr(args, "token", None)
    cfg.oidc = {}
    if args.issuer:
        meta = discover(args.issuer)
        tokens = (browser_flow if args.browser else device_flow)(meta, args.client_id,
                                                                 args.scope)
        token = tokens["access_token"]
        if tokens.get("refresh_token"):
            cfg.oidc = {"issuer": args.issuer, "client_id": args.client_id,
                        "token_endpoint": meta["token_endpoint"],
                        "refresh_token": tokens["refresh_token"]}
    elif args.token_stdin:
        token = sys.stdin.readline().strip()
    elif not token:
        if not sys.stdin.isatty():
            raise UsageError("give --token, --token-stdin or --issuer")
        token = getpass.getpass("Token (maas_pat_...): ").strip()
    if not token:
        raise UsageError("an empty token")
    cfg.token = token
    tenants = [t["metadata"]["name"] for t in client_for(cfg).items("tenants/")]
    chosen = getattr(args, "tenant", None)
    if chosen:
        if chosen not in tenants:
            raise ApiError(404, f'tenant "{chosen}" not found (yours: '
                                f'{", ".join(tenants) or "none"})')
        cfg.tenant = chosen
    elif cfg.tenant not in tenants:
        cfg.tenant = tenants[0] if len(tenants) == 1 else ""
    where = config.save(cfg)
    print(f"Logged in to {cfg.url} (tenants: {', '.join(tenants) or 'none'}).")
    print(f'Current tenant: "{cfg.tenant}".' if cfg.tenant else
          "No current tenant: run `maasctl config set-tenant NAME`.")
    print(f"Settings saved in {where}.", file=sys.stderr)
