"""Identity settings, read when used, and the provider's metadata (cached).

An operator sets one URL (the provider's issuer), a client id and a secret; every endpoint comes
from `<issuer>/.well-known/openid-configuration`, and the introspection endpoint, which some
providers list only in their RFC 8414 metadata, from there. With no issuer, local accounts are
used. A use of an endpoint that fails makes the next use read the metadata again (at most every
MAAS_OIDC_DISCOVERY_MIN_REFRESH seconds), and a document that cannot be read again is kept.
"""
import logging
import threading
import time
from urllib.parse import quote, urlsplit

import requests
from django.conf import settings

logger = logging.getLogger(__name__)

DEFAULTS = {
    "MAAS_OIDC_ISSUER": "",
    "MAAS_OIDC_CLIENT_ID": "maas",
    "MAAS_OIDC_CLIENT_SECRET": "",
    "MAAS_OIDC_SCOPES": "openid email profile",
    # How this client authenticates at the token and introspection endpoints.
    "MAAS_OIDC_CLIENT_AUTH": "client_secret_post",  # or client_secret_basic
    # Accepted `aud`, `azp` or RFC 9068 `client_id` values of API tokens; empty: the client id.
    "MAAS_OIDC_AUDIENCES": [],
    "MAAS_OIDC_ALGORITHMS": ["RS256", "RS384", "RS512", "PS256", "ES256", "ES384"],
    "MAAS_OIDC_LEEWAY": 30,  # seconds of clock skew allowed for exp, nbf and iat
    "MAAS_OIDC_TIMEOUT": 5.0,
    "MAAS_OIDC_DISCOVERY_MAX_AGE": 3600,
    # A failed use reads the metadata again, at most this often (seconds).
    "MAAS_OIDC_DISCOVERY_MIN_REFRESH": 30,
    # RFC 7662, for opaque access tokens: the endpoint when the metadata lists none, and how
    # long an answer is reused (never past the token's exp; 0: ask every time).
    "MAAS_OIDC_INTROSPECTION_ENDPOINT": "",
    "MAAS_OIDC_INTROSPECTION_CACHE": 60,
    # A hanging introspection endpoint must not take the web workers: seconds per call, and how
    # many of a host's workers may wait on it at once (keep it below their number).
    "MAAS_OIDC_INTROSPECTION_TIMEOUT": 2.0,
    "MAAS_OIDC_INTROSPECTION_CONCURRENCY": 1,
    "MAAS_OIDC_JWKS_MAX_AGE": 3600,
    # An unknown key id refetches the key set at most this often (rotation, not a DoS lever).
    "MAAS_OIDC_JWKS_MIN_REFRESH": 10,
    # Claims to memberships (docs/identity.md).
    "MAAS_OIDC_GROUPS_CLAIM": "groups",
    "MAAS_OIDC_GROUP_PATTERN": "/tenants/{tenant}/{role}",
    "MAAS_OIDC_ROLES_CLAIMS": ["realm_access.roles", "resource_access.{client_id}.roles",
                               "roles"],
    "MAAS_OIDC_ROLE_PATTERN": "tenant:{tenant}:{role}",
    "MAAS_OIDC_STAFF_CLAIM": ["realm_access.roles", "roles"],
    "MAAS_OIDC_STAFF_VALUE": "maas-operator",
    # The user name of a new account: the first of these claims that is set.
    "MAAS_OIDC_USERNAME_CLAIMS": ["preferred_username", "email", "sub"],
}


def get(name: str):
    return getattr(settings, name, DEFAULTS[name])


def enabled() -> bool:
    return bool(get("MAAS_OIDC_ISSUER"))


def issuer() -> str:
    return get("MAAS_OIDC_ISSUER").rstrip("/")


def client_id() -> str:
    return get("MAAS_OIDC_CLIENT_ID")


def audiences() -> list[str]:
    return list(get("MAAS_OIDC_AUDIENCES") or [client_id()])


class ProviderUnavailable(Exception):
    """The provider's discovery document or key set could not be read."""


_lock = threading.Lock()
_documents: dict[str, dict] = {}  # URL -> {"document", "at", "stale"}


def _read(url: str, max_age: float) -> dict | None:
    """The JSON document at url, cached; None when there is none (404, also cached)."""
    now = time.monotonic()
    with _lock:
        cached = _documents.get(url)
        if cached and not cached["stale"] and now - cached["at"] < max_age:
            return cached["document"]
        try:
            response = requests.get(url, timeout=get("MAAS_OIDC_TIMEOUT"))
            if response.status_code == 404 and (cached is None or cached["document"] is None):
                # none there (RFC 8414 metadata is optional): remembered like a document, so
                # that each opaque token does not ask again
                _documents[url] = {"document": None, "at": now, "stale": False}
                return None
            response.raise_for_status()
            document = response.json()
            if not isinstance(document, dict):
                raise ValueError("not a JSON object")
        except (requests.RequestException, ValueError) as exc:
            logger.warning("oidc.discovery_failed", extra={"url": url, "error": str(exc)})
            if cached is not None:
                # The provider is down or mid-deploy: what it said last is the best guess, and
                # the next use tries again no sooner than the floor.
                cached.update(at=now - max_age + get("MAAS_OIDC_DISCOVERY_MIN_REFRESH"),
                              stale=False)
                return cached["document"]
            raise ProviderUnavailable(f"cannot read {url}") from exc
        _documents[url] = {"document": document, "at": now, "stale": False}
        return document


def discovery(max_age: float | None = None) -> dict:
    """The issuer's discovery document, read again when older than max_age (default
    MAAS_OIDC_DISCOVERY_MAX_AGE) or after a failed use (discovery_failed)."""
    url = issuer()
    document = _read(f"{url}/.well-known/openid-configuration",
                     get("MAAS_OIDC_DISCOVERY_MAX_AGE") if max_age is None else max_age)
    if document is None:
        raise ProviderUnavailable(f"{url} publishes no discovery document")
    if document.get("issuer", "").rstrip("/") != url:
        raise ProviderUnavailable(f"the discovery document of {url} names another issuer")
    return document


def discovery_failed(reason: str) -> None:
    """An endpoint from the metadata failed: read the metadata again at its next use, unless
    it was read less than MAAS_OIDC_DISCOVERY_MIN_REFRESH seconds ago."""
    now = time.monotonic()
    with _lock:
        for cached in _documents.values():
            if now - cached["at"] >= get("MAAS_OIDC_DISCOVERY_MIN_REFRESH"):
                cached["stale"] = True
    logger.info("oidc.endpoint_failed", extra={"reason": reason})


def server_metadata() -> dict:
    """The RFC 8414 authorization server metadata, {} when the provider has none; some
    providers (django-oauth-toolkit) list introspection only there."""
    parts = urlsplit(issuer())
    url = f"{parts.scheme}://{parts.netloc}/.well-known/oauth-authorization-server{parts.path}"
    try:
        document = _read(url, get("MAAS_OIDC_DISCOVERY_MAX_AGE"))
    except ProviderUnavailable:
        return {}
    if not document or document.get("issuer", "").rstrip("/") != issuer():
        return {}
    return document


def introspection_endpoint() -> str | None:
    """Where opaque access tokens are introspected (RFC 7662), or None."""
    return (get("MAAS_OIDC_INTROSPECTION_ENDPOINT") or discovery().get("introspection_endpoint")
            or server_metadata().get("introspection_endpoint") or None)


def client_auth() -> tuple[dict, tuple | None]:
    """This client's credentials for a back-channel POST: (form fields, basic auth)."""
    if get("MAAS_OIDC_CLIENT_AUTH") == "client_secret_basic":
        return {}, (quote(client_id(), safe=""), quote(get("MAAS_OIDC_CLIENT_SECRET"), safe=""))
    return {"client_id": client_id(), "client_secret": get("MAAS_OIDC_CLIENT_SECRET")}, None


def forget() -> None:
    """Drops the cached metadata (tests, or after changing the issuer)."""
    with _lock:
        _documents.clear()


# mozilla-django-oidc reads its OIDC_* settings through get_settings(); these come from here.
def _endpoint(key: str):
    return lambda: discovery()[key]


OIDC_SETTINGS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": _endpoint("authorization_endpoint"),
    "OIDC_OP_TOKEN_ENDPOINT": _endpoint("token_endpoint"),
    "OIDC_OP_USER_ENDPOINT": _endpoint("userinfo_endpoint"),
    "OIDC_OP_JWKS_ENDPOINT": _endpoint("jwks_uri"),
    "OIDC_RP_CLIENT_ID": client_id,
    "OIDC_RP_CLIENT_SECRET": lambda: get("MAAS_OIDC_CLIENT_SECRET"),
    "OIDC_RP_SCOPES": lambda: get("MAAS_OIDC_SCOPES"),
    "OIDC_RP_SIGN_ALGO": lambda: "RS256",
    "OIDC_USE_PKCE": lambda: True,
    "OIDC_USE_NONCE": lambda: True,
    "OIDC_STORE_ID_TOKEN": lambda: True,
    "OIDC_TIMEOUT": lambda: get("MAAS_OIDC_TIMEOUT"),
    "OIDC_TOKEN_USE_BASIC_AUTH": lambda: get("MAAS_OIDC_CLIENT_AUTH") == "client_secret_basic",
    "OIDC_AUTHENTICATION_CALLBACK_URL": lambda: "oidc_authentication_callback",
}


def oidc_setting(attr: str, *default):
    """get_settings() for mozilla-django-oidc's classes: derived values first, then Django's."""
    if attr in OIDC_SETTINGS:
        return OIDC_SETTINGS[attr]()
    if default:
        return getattr(settings, attr, default[0])
    return getattr(settings, attr)
