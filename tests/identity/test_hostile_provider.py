"""What a provider unlike the suite's own does to the API (issue 60, "Identity with a third
provider"): a JWT whose header does not fit its key, keys regenerated under the same `kid`, an
outage, a hanging introspection endpoint. The provider is a stand-in served from this process
(discovery, JWKS and introspection over real HTTP), so each test sets exactly what it serves."""
import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm
from rest_framework.test import APIClient

from tenants.identity import config as identity_config
from tenants.identity.jwks import keys as jwks_cache
from tenants.identity.provisioning import user_for_claims
from tests.conftest import wait_for

from .conftest import free_port, new_key


class StandIn(ThreadingHTTPServer):
    """An OpenID provider's discovery document, key set and introspection endpoint. `status`
    answers a path with an error instead; `hang` holds introspections until `release` is set."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server_address[1]}"
        self.keys: list[dict] = []
        self.status: dict[str, int] = {}
        self.hang, self.release = False, threading.Event()
        self.seen: list[str] = []

    def count(self, path: str) -> int:
        return self.seen.count(path)

    def handle_error(self, request, client_address):
        pass  # a client that gave up on a held introspection: nothing to report


class Handler(BaseHTTPRequestHandler):
    server: StandIn

    def do_GET(self):
        self._answer()

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer()

    def _answer(self):
        standin, path = self.server, self.path
        standin.seen.append(path)
        if path == "/introspect" and standin.hang:
            standin.release.wait(30)
        bodies = {
            "/.well-known/openid-configuration": {
                "issuer": standin.issuer, "jwks_uri": f"{standin.issuer}/jwks",
                "introspection_endpoint": f"{standin.issuer}/introspect"},
            "/jwks": {"keys": standin.keys},
            "/introspect": {"active": False},
        }
        status = standin.status.get(path, 200 if path in bodies else 404)
        body = json.dumps(bodies.get(path, {}) if status == 200 else {}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def provider(settings):
    """The stand-in, configured as MaaS's provider, with empty key and metadata caches."""
    standin = StandIn()
    thread = threading.Thread(target=standin.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    settings.MAAS_OIDC_ISSUER = standin.issuer
    settings.MAAS_OIDC_CLIENT_ID, settings.MAAS_OIDC_CLIENT_SECRET = "maas", "secret"
    identity_config.forget()
    jwks_cache.forget()
    yield standin
    standin.release.set()
    standin.shutdown()
    standin.server_close()
    identity_config.forget()
    jwks_cache.forget()


def public(jwk: dict) -> dict:
    return {k: v for k, v in jwk.items() if k not in ("d", "p", "q", "dp", "dq", "qi")}


def sign(issuer: str, private, kid, alg: str = "RS256", **claims) -> str:
    now = int(time.time())
    body = {"iss": issuer, "aud": "maas", "sub": "ann", "iat": now, "exp": now + 300,
            "scope": "openid", **claims}
    return jwt.encode(body, private, algorithm=alg, headers={"kid": kid})


def call(token: str):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client.get("/api/v1/tenants/")


def b64(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


# A JWT whose header does not fit its key ---------------------------------------------------

# (token, code, words of the reason): JWTs that the JWT library answers with an exception of its
# own (a 500, before): the stand-in serves an RSA key `rsa-1` and an EC P-256 key `ec-1`. They
# are refused before their issuer is read.
ILL_FITTING = {
    "es256_header_rsa_key": (
        sign("http://any", ec.generate_private_key(ec.SECP256R1()), "rsa-1", "ES256"),
        "key_mismatch", "algorithm ES256 does not fit its key (kid 'rsa-1', kty RSA)"),
    "es384_header_p256_key": (
        sign("http://any", ec.generate_private_key(ec.SECP384R1()), "ec-1", "ES384"),
        "key_mismatch", "algorithm ES384 does not fit its key"),
    "kid_not_a_string": (
        f"{b64({'alg': 'RS256', 'kid': ['rsa-1']})}.{b64({'sub': 'x'})}.c2ln",
        "malformed_token", "Key ID header parameter must be a string"),
}


@pytest.mark.parametrize("case", sorted(ILL_FITTING))
def test_a_jwt_whose_header_does_not_fit_its_key_gets_401_with_the_reason(provider, db, case):
    rsa_jwk, _ = new_key("rsa-1")
    ec_jwk = json.loads(ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP256R1()).public_key()))
    provider.keys = [public(rsa_jwk), {**ec_jwk, "kid": "ec-1", "use": "sig"}]
    token, code, words = ILL_FITTING[case]

    response = call(token)

    assert response.status_code == 401, response.content
    assert response.json()["code"] == code
    assert words in response.json()["message"]
    assert words in response["WWW-Authenticate"]


# A key regenerated under the same kid ------------------------------------------------------

def test_a_key_regenerated_under_its_kid_is_fetched_again_once_within_the_floor(provider, db,
                                                                                settings):
    old_jwk, old_private = new_key("realm-key")
    new_jwk, new_private = new_key("realm-key")
    provider.keys = [public(old_jwk)]
    user_for_claims({"sub": "ann", "preferred_username": "ann"})
    assert call(sign(provider.issuer, old_private, "realm-key")).status_code == 200
    provider.keys = [public(new_jwk)]
    settings.MAAS_OIDC_JWKS_MIN_REFRESH = 0
    fetched = provider.count("/jwks")

    regenerated = call(sign(provider.issuer, new_private, "realm-key"))
    settings.MAAS_OIDC_JWKS_MIN_REFRESH = 3600
    forged = call(sign(provider.issuer, old_private, "realm-key"))

    assert regenerated.status_code == 200, regenerated.content
    assert forged.status_code == 401
    assert forged.json()["code"] == "bad_signature"
    assert provider.count("/jwks") - fetched == 1  # the forged token fetched nothing


# An outage ---------------------------------------------------------------------------------

def test_during_an_outage_the_keys_known_still_verify_and_are_asked_for_once(provider, db,
                                                                             settings):
    jwk, private = new_key("rsa-1")
    provider.keys = [public(jwk)]
    user_for_claims({"sub": "ann", "preferred_username": "ann"})
    token = sign(provider.issuer, private, "rsa-1")
    assert call(token).status_code == 200
    provider.status["/jwks"] = 503
    settings.MAAS_OIDC_JWKS_MAX_AGE = 0  # every key set is stale from now on
    settings.MAAS_OIDC_JWKS_MIN_REFRESH = 3600
    fetched = provider.count("/jwks")

    answers = [call(token).status_code for _ in range(3)]

    assert answers == [200, 200, 200]
    assert provider.count("/jwks") - fetched == 1  # one try, then the floor

OUTAGES = ["jwt_keys_answer_503", "opaque_introspection_answers_500",
           "opaque_provider_not_listening"]


def outage(case: str, provider, settings) -> str:
    """Sets up one kind of outage; the token to send."""
    if case == "jwt_keys_answer_503":
        provider.status["/jwks"] = 503
        return sign(provider.issuer, new_key("rsa-1")[1], "rsa-1")
    if case == "opaque_introspection_answers_500":
        provider.status["/introspect"] = 500
        return "opaque-outage"
    settings.MAAS_OIDC_ISSUER = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    return "opaque-outage"


@pytest.mark.parametrize("case", sorted(OUTAGES))
def test_a_provider_outage_answers_503_with_retry_after(provider, db, settings, case):
    token = outage(case, provider, settings)

    response = call(token)

    assert response.status_code == 503, response.content
    assert int(response["Retry-After"]) > 0
    body = response.json()
    assert (body["status"], body["code"]) == (503, "provider_unavailable")
    assert "try again in" in body["message"] and body["detail"] == body["message"]


# A hanging introspection endpoint ----------------------------------------------------------

def test_a_hanging_introspection_answers_503_after_its_own_timeout(provider, db, settings):
    provider.hang = True
    settings.MAAS_OIDC_TIMEOUT = 3  # what the introspection used to wait
    settings.MAAS_OIDC_INTROSPECTION_TIMEOUT = 0.3

    started = time.monotonic()
    response = call("opaque-hanging")
    waited = time.monotonic() - started

    assert response.status_code == 503, response.content
    assert response.json()["code"] == "provider_unavailable"
    assert waited < settings.MAAS_OIDC_TIMEOUT


def test_a_flood_of_one_token_while_introspection_fails_asks_the_provider_once(provider, db,
                                                                              settings):
    provider.status["/introspect"] = 502

    codes = [call("opaque-flood").status_code for _ in range(5)]

    assert codes == [503] * 5
    assert provider.count("/introspect") == 1


def test_past_the_concurrency_limit_an_introspection_answers_503_at_once(provider, db,
                                                                         settings):
    provider.hang = True
    settings.MAAS_OIDC_TIMEOUT = 1  # what the introspection used to wait
    settings.MAAS_OIDC_INTROSPECTION_TIMEOUT = 20
    settings.MAAS_OIDC_INTROSPECTION_CONCURRENCY = 1
    held = {}
    holder = threading.Thread(target=lambda: held.update(response=call("opaque-held")))
    holder.start()
    wait_for(lambda: provider.count("/introspect") == 1, 10, what="the held introspection")

    started = time.monotonic()
    refused = call("opaque-next")
    waited = time.monotonic() - started
    provider.release.set()
    holder.join(10)

    assert refused.status_code == 503, refused.content
    assert refused.json()["code"] == "introspection_busy"
    assert refused["Retry-After"] == "1"
    assert waited < settings.MAAS_OIDC_TIMEOUT
    assert provider.count("/introspect") == 1
    assert held["response"].json()["code"] == "token_inactive"  # answered once released
