"""Session refresh: a browser session from a provider sign-in checks back with the provider
whenever the access token it got expires, by a refresh-token grant (server to server, no
redirect, so htmx requests and API calls with the session work throughout).

- The provider answers: the session goes on, with the new tokens, and the new claims are applied
  (a group removed at the provider removes the membership now, not at the next sign-in).
- The provider refuses (user disabled, session ended or revoked there): the session ends here.
- The provider cannot be reached: the session goes on for MAAS_OIDC_REFRESH_GRACE seconds,
  trying again every RETRY seconds, then ends.
"""
import logging
import time

import requests
from django.conf import settings
from django.contrib import auth
from django.core.cache import cache
from django.http import HttpResponse
from django.urls import reverse

from . import config, provisioning
from .introspection import userinfo
from .tokens import (
    TokenRejected,
    Unavailable,
    is_jwt,
    validate_access_token,
    validate_refreshed_id_token,
)

logger = logging.getLogger(__name__)
RETRY = 30  # seconds between tries while the provider cannot be reached
MARGIN = 0.8  # refresh when this share of the access token's lifetime has passed
KEYS = ("oidc_refresh_token", "oidc_refresh_at", "oidc_subject", "oidc_refresh_failing_since")


def remember(session, token_info: dict, subject: str) -> None:
    """Keeps what a refresh needs, from a token response (sign-in or refresh)."""
    session["oidc_subject"] = subject
    if token_info.get("refresh_token"):
        session["oidc_refresh_token"] = token_info["refresh_token"]
    if token_info.get("id_token"):
        session["oidc_id_token"] = token_info["id_token"]  # the hint for signing out
    lifetime = float(token_info.get("expires_in") or 300)
    session["oidc_refresh_at"] = time.time() + max(lifetime * MARGIN, 5)
    session.pop("oidc_refresh_failing_since", None)


class Refused(Exception):
    """The provider no longer stands behind this sign-in."""


class Unreachable(Exception):
    """No answer from the provider (network, 5xx)."""


def _grant(refresh_token: str) -> dict:
    try:
        fields, basic = config.client_auth()
        response = requests.post(config.discovery()["token_endpoint"], data={
            "grant_type": "refresh_token", "refresh_token": refresh_token, **fields},
            auth=basic, timeout=config.get("MAAS_OIDC_TIMEOUT"))
    except (requests.RequestException, config.ProviderUnavailable) as exc:
        config.discovery_failed(f"token endpoint: {exc}")
        raise Unreachable(str(exc)) from exc
    if response.status_code in (400, 401):  # invalid_grant: expired, revoked, session ended
        raise Refused(response.text[:200])
    if response.status_code != 200:
        config.discovery_failed(f"token endpoint: HTTP {response.status_code}")
        raise Unreachable(f"HTTP {response.status_code}")
    return response.json()


def refreshed_claims(tokens: dict, subject: str) -> dict:
    """The claims of a refresh-token grant's answer, from the same sources as a sign-in: the
    access token when it is a JWT (Keycloak puts realm_access there), else userinfo (an opaque
    token is only worth what the provider says of it), and the new ID token, if any."""
    access = tokens["access_token"]
    try:
        if is_jwt(access):
            claims = validate_access_token(access)
        else:
            claims = userinfo(access)
            if not claims:
                raise Refused("the userinfo endpoint does not accept the new access token")
        if tokens.get("id_token"):
            claims = {**claims, **validate_refreshed_id_token(tokens["id_token"], subject)}
    except Unavailable as exc:  # keys or userinfo out of reach: not a refusal
        raise Unreachable(exc.reason) from None
    return claims


def _end(request, reason: str):
    logger.info("oidc.session_ended", extra={"username": request.user.get_username(),
                                             "reason": reason})
    auth.logout(request)
    if request.headers.get("HX-Request"):  # htmx: send the whole page to the sign-in
        return HttpResponse(status=200, headers={"HX-Redirect": reverse("login")})
    return None


def _acquire(lock: str) -> bool:
    """One refresh per session at a time: a rotated refresh token is good for one use only.
    Without Redis the refresh goes ahead unlocked rather than failing the page."""
    try:
        return cache.add(lock, 1, timeout=RETRY)
    except Exception as exc:  # the cache backend's own connection errors
        logger.warning("oidc.refresh_unlocked", extra={"error": str(exc)})
        return True


def _release(lock: str) -> None:
    try:
        cache.delete(lock)
    except Exception:  # noqa: BLE001 - it expires by itself
        pass


def refresh(request):
    """Refreshes the session if its access token expired; a response to send instead, or None."""
    session = request.session
    now = time.time()
    if now < session.get("oidc_refresh_at", now + 1):
        return None
    lock = f"maas:oidc-refresh:{session.session_key}"
    if not _acquire(lock):
        return None  # another request of this session is refreshing it
    try:
        tokens = _grant(session.get("oidc_refresh_token", ""))
        claims = refreshed_claims(tokens, session.get("oidc_subject"))
        if claims.get("sub") != session.get("oidc_subject"):
            raise Refused("the provider answered for another subject")
        user = provisioning.user_for_claims(claims, request_id=getattr(request, "request_id", ""),
                                            force=False)
        if user.pk != request.user.pk:
            raise Refused("the claims name another user")
    except (Refused, TokenRejected, KeyError, ValueError) as exc:
        return _end(request, str(exc))
    except Unreachable as exc:
        failing_since = session.setdefault("oidc_refresh_failing_since", now)
        if now - failing_since > getattr(settings, "MAAS_OIDC_REFRESH_GRACE", 300):
            return _end(request, f"the provider was unreachable for too long: {exc}")
        session["oidc_refresh_at"] = now + RETRY
        logger.warning("oidc.refresh_unreachable", extra={"error": str(exc)})
        return None
    finally:
        _release(lock)
    remember(session, tokens, claims["sub"])
    return None


class SessionRefreshMiddleware:
    """Runs `refresh` for sessions that came from a provider sign-in (after authentication)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        # A request without a session cookie (API tokens, health checks) costs nothing here.
        if ("oidc_refresh_at" in request.session and config.enabled()
                and request.user.is_authenticated):
            response = refresh(request)
            if response is not None:
                return response
        return self.get_response(request)
