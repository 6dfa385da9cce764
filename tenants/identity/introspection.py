"""Opaque access tokens: RFC 7662 introspection at the provider, as this client, with the
answer reused until the token expires or MAAS_OIDC_INTROSPECTION_CACHE seconds pass (a revoked
token is refused at most that long after). The subject comes from the answer's `sub`, else
from the userinfo endpoint with the token itself (django-oauth-toolkit names no subject).

A provider that hangs must not take the web workers: each call waits at most
MAAS_OIDC_INTROSPECTION_TIMEOUT, at most MAAS_OIDC_INTROSPECTION_CONCURRENCY of this host's
workers wait on it at once (the others answer 503 at once), and a failure is remembered for its
Retry-After, so a flood of one token asks the provider once."""
import hashlib
import logging
import math
import socket
import time

import requests
from django.core.cache import cache

from . import config
from .tokens import NOT_ACCESS_TOKENS, TokenRejected, Unavailable, check_audience

logger = logging.getLogger(__name__)
NOT_ACCESS_TYPES = {"refresh_token", "refresh", "id_token"}  # RFC 7662 token_type values
ACCESS_TYPES = {"bearer", "dpop", "n_a", "access_token"}
# Slots are counted per host, in Redis: gunicorn's sync workers are processes of one thread,
# so a semaphore in each would never be contended.
SLOTS = f"maas:oidc-introspection-slot:{socket.gethostname()}"


def _cache_key(token: str) -> str:
    digest = hashlib.sha256(f"{config.issuer()}\0{token}".encode()).hexdigest()
    return f"maas:oidc-introspection:{digest}"


def _cached(key: str):
    try:
        return cache.get(key)
    except Exception as exc:  # the cache backend's own errors: ask the provider instead
        logger.warning("oidc.introspection_cache_failed", extra={"error": str(exc)})
        return None


def _store(key: str, value: dict, seconds: float) -> None:
    if seconds < 1:
        return
    try:
        cache.set(key, value, timeout=int(seconds))
    except Exception as exc:  # noqa: BLE001 - without the cache every call introspects
        logger.warning("oidc.introspection_cache_failed", extra={"error": str(exc)})


def _take_slot() -> str | None:
    """One of this host's MAAS_OIDC_INTROSPECTION_CONCURRENCY slots, taken without waiting, or
    Unavailable; None without Redis (then each call is bounded by its timeout only). A slot
    expires by itself after the longest an introspection can take (two calls, each with a
    connect and a read timeout), so a worker killed while holding one does not keep it."""
    hold = math.ceil(4 * config.get("MAAS_OIDC_INTROSPECTION_TIMEOUT")) + 1
    limit = config.get("MAAS_OIDC_INTROSPECTION_CONCURRENCY")
    try:
        for slot in (f"{SLOTS}:{i}" for i in range(limit)):
            if cache.add(slot, 1, timeout=hold):
                return slot
    except Exception as exc:  # noqa: BLE001 - the cache backend's own connection errors
        logger.warning("oidc.introspection_unlimited", extra={"error": str(exc)})
        return None
    logger.warning("oidc.introspection_busy", extra={"limit": limit})
    raise Unavailable(f"this server already waits on {limit} token introspection(s) at the "
                      "provider", code="introspection_busy", retry_after=1)


def _free_slot(slot: str | None) -> None:
    if slot is None:
        return
    try:
        cache.delete(slot)
    except Exception:  # noqa: BLE001 - it expires by itself
        pass


def _post(endpoint: str, token: str) -> dict:
    fields, basic = config.client_auth()
    timeout = config.get("MAAS_OIDC_INTROSPECTION_TIMEOUT")
    try:
        response = requests.post(endpoint, data={"token": token,
                                                 "token_type_hint": "access_token", **fields},
                                 auth=basic, timeout=timeout,
                                 headers={"Accept": "application/json"})
    except requests.RequestException as exc:
        config.discovery_failed(f"introspection: {exc}")
        raise Unavailable("the provider's introspection endpoint cannot be reached or did not "
                          "answer in time") from None
    if response.status_code != 200:
        config.discovery_failed(f"introspection: HTTP {response.status_code}")
        raise Unavailable(f"the provider's introspection endpoint answered HTTP "
                          f"{response.status_code} (is this client allowed to introspect?)")
    try:
        answer = response.json()
    except ValueError:
        raise Unavailable("the provider's introspection answer is not JSON") from None
    if not isinstance(answer, dict):
        raise Unavailable("the introspection answer is not an object")
    return answer


def userinfo(access_token: str, timeout: float | None = None) -> dict:
    """The userinfo endpoint's claims for this access token ({} when there is none); timeout
    defaults to MAAS_OIDC_TIMEOUT."""
    try:
        endpoint = config.discovery().get("userinfo_endpoint")
    except config.ProviderUnavailable as exc:
        raise Unavailable(str(exc)) from None
    if not endpoint:
        return {}
    try:
        response = requests.get(endpoint, headers={"Authorization": f"Bearer {access_token}"},
                                timeout=timeout or config.get("MAAS_OIDC_TIMEOUT"))
    except requests.RequestException as exc:
        config.discovery_failed(f"userinfo: {exc}")
        raise Unavailable("the userinfo endpoint cannot be reached") from None
    if response.status_code in (401, 403):
        return {}  # not a token for userinfo (a client's own, say): no person behind it
    if response.status_code != 200:
        config.discovery_failed(f"userinfo: HTTP {response.status_code}")
        raise Unavailable(f"the userinfo endpoint answered HTTP {response.status_code}")
    try:
        claims = response.json()
    except ValueError:  # a signed userinfo JWT (rare): MaaS asks for JSON only
        raise Unavailable("the userinfo answer is not JSON") from None
    return claims if isinstance(claims, dict) else {}


def _check(answer: dict) -> dict:
    """The claims of an active answer, after the checks a JWT would get; TokenRejected."""
    if answer.get("active") is not True:
        raise TokenRejected("token_inactive", "the provider says the token is not active "
                                              "(expired, revoked or unknown)")
    if answer.get("iss") and str(answer["iss"]).rstrip("/") != config.issuer():
        raise TokenRejected("wrong_issuer", f"the token was not issued by {config.issuer()} (iss)")
    leeway = config.get("MAAS_OIDC_LEEWAY")
    if isinstance(answer.get("exp"), int | float) and answer["exp"] + leeway < time.time():
        raise TokenRejected("token_expired", "the token has expired (exp)")
    token_type = str(answer.get("token_type") or "").lower()
    if token_type in NOT_ACCESS_TYPES or str(answer.get("typ") or "").lower() in NOT_ACCESS_TOKENS:
        raise TokenRejected("not_an_access_token",
                            f"a {answer.get('token_type') or answer.get('typ')} token is not an "
                            "access token")
    check_audience(answer, config.audiences())
    return dict(answer)


def _identify(claims: dict, token: str) -> dict:
    """Adds `sub` and makes sure a person's token is an access token.

    RFC 7662 makes token_type optional: oidc-provider leaves it out for refresh tokens only,
    django-oauth-toolkit for everything, and names no subject either. So a person's token
    without an access token type, or without `sub`, is shown to the userinfo endpoint, which
    takes access tokens only and names the subject. A token with no person behind it (a
    client's own, RFC 6749 client credentials) gets the client's id as `sub`, as RFC 9068 says.
    """
    typed = (str(claims.get("token_type") or "").lower() in ACCESS_TYPES
             or str(claims.get("typ") or "").lower() == "bearer")
    person_behind = claims.get("sub") or claims.get("username")
    if person_behind and (not typed or not claims.get("sub")):
        person = userinfo(token, timeout=config.get("MAAS_OIDC_INTROSPECTION_TIMEOUT"))
        if not person.get("sub") and config.discovery().get("userinfo_endpoint"):
            raise TokenRejected("not_an_access_token", "the provider does not say the token is an "
                                "access token (no token_type) and its userinfo endpoint refuses "
                                "it: a refresh token is not an access token")
        if person.get("sub"):
            if claims.get("sub") and claims["sub"] != person["sub"]:
                raise TokenRejected("wrong_subject", "userinfo names another subject")
            return {**person, **claims, "sub": person["sub"]}
    if claims.get("sub"):
        return claims
    if person_behind:
        raise TokenRejected("missing_claim", "the provider names no subject for the token (no "
                                             "sub in the introspection or userinfo answer)")
    if not claims.get("client_id"):
        raise TokenRejected("missing_claim", "the token names neither a subject nor a client")
    return {**claims, "sub": claims["client_id"]}


def introspect(token: str) -> dict:
    """The claims of an opaque access token, or TokenRejected saying why not."""
    try:
        endpoint = config.introspection_endpoint()
    except config.ProviderUnavailable as exc:
        raise Unavailable(str(exc)) from None
    if not endpoint:
        raise TokenRejected("malformed_token", "the token is not a JWT and the provider offers no "
                                               "token introspection (introspection_endpoint)")
    key = _cache_key(token)
    hit = _cached(key)
    if hit is not None:
        if "unavailable" in hit:
            raise Unavailable(hit["unavailable"])
        if "refused" in hit:
            raise TokenRejected(*hit["refused"])
        return hit["claims"]
    ttl = float(config.get("MAAS_OIDC_INTROSPECTION_CACHE"))
    slot = _take_slot()
    try:
        claims = _identify(_check(_post(endpoint, token)), token)
    except Unavailable as exc:
        # Remembered for its Retry-After: a flood of this token asks a hanging provider once.
        _store(key, {"unavailable": exc.reason}, exc.retry_after)
        raise
    except TokenRejected as exc:
        _store(key, {"refused": (exc.code, exc.reason)}, ttl)
        raise
    finally:
        _free_slot(slot)
    if isinstance(claims.get("exp"), int | float):
        ttl = min(ttl, claims["exp"] - time.time())
    _store(key, {"claims": claims}, ttl)
    return claims
