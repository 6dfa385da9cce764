"""Identity settings, read when used, and the provider's discovery document (cached).

An operator sets one URL (the realm's issuer), a client id and a secret; every endpoint comes
from `<issuer>/.well-known/openid-configuration`. With no issuer, local accounts are used.
"""
import logging
import threading
import time

import requests
from django.conf import settings

logger = logging.getLogger(__name__)

DEFAULTS = {
    "MAAS_OIDC_ISSUER": "",
    "MAAS_OIDC_CLIENT_ID": "maas",
    "MAAS_OIDC_CLIENT_SECRET": "",
    "MAAS_OIDC_SCOPES": "openid email profile",
    # Accepted `aud` (or `azp`) values of API tokens; empty means the client id.
    "MAAS_OIDC_AUDIENCES": [],
    "MAAS_OIDC_ALGORITHMS": ["RS256", "RS384", "RS512", "PS256", "ES256", "ES384"],
    "MAAS_OIDC_LEEWAY": 30,  # seconds of clock skew allowed for exp, nbf and iat
    "MAAS_OIDC_TIMEOUT": 5.0,
    "MAAS_OIDC_DISCOVERY_MAX_AGE": 3600,
    "MAAS_OIDC_JWKS_MAX_AGE": 3600,
    # An unknown key id refetches the key set at most this often (rotation, not a DoS lever).
    "MAAS_OIDC_JWKS_MIN_REFRESH": 10,
    # Claims to memberships (docs/identity.md).
    "MAAS_OIDC_GROUPS_CLAIM": "groups",
    "MAAS_OIDC_GROUP_PATTERN": "/tenants/{tenant}/{role}",
    "MAAS_OIDC_ROLES_CLAIMS": ["realm_access.roles", "resource_access.{client_id}.roles"],
    "MAAS_OIDC_ROLE_PATTERN": "tenant:{tenant}:{role}",
    "MAAS_OIDC_STAFF_CLAIM": "realm_access.roles",
    "MAAS_OIDC_STAFF_VALUE": "maas-operator",
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
_discovery: dict = {"issuer": None, "document": None, "at": 0.0}


def discovery() -> dict:
    """The issuer's discovery document, fetched once an hour at most."""
    url = issuer()
    with _lock:
        fresh = time.monotonic() - _discovery["at"] < get("MAAS_OIDC_DISCOVERY_MAX_AGE")
        if _discovery["issuer"] == url and _discovery["document"] and fresh:
            return _discovery["document"]
        try:
            response = requests.get(f"{url}/.well-known/openid-configuration",
                                    timeout=get("MAAS_OIDC_TIMEOUT"))
            response.raise_for_status()
            document = response.json()
        except (requests.RequestException, ValueError) as exc:
            logger.warning("oidc.discovery_failed", extra={"issuer": url, "error": str(exc)})
            raise ProviderUnavailable(f"cannot read the discovery document of {url}") from exc
        if document.get("issuer", "").rstrip("/") != url:
            raise ProviderUnavailable(f"the discovery document of {url} names another issuer")
        _discovery.update(issuer=url, document=document, at=time.monotonic())
        return document


def forget() -> None:
    """Drops the cached discovery document (tests, or after changing the issuer)."""
    with _lock:
        _discovery.update(issuer=None, document=None, at=0.0)


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
    "OIDC_AUTHENTICATION_CALLBACK_URL": lambda: "oidc_authentication_callback",
}


def oidc_setting(attr: str, *default):
    """get_settings() for mozilla-django-oidc's classes: derived values first, then Django's."""
    if attr in OIDC_SETTINGS:
        return OIDC_SETTINGS[attr]()
    if default:
        return getattr(settings, attr, default[0])
    return getattr(settings, attr)
