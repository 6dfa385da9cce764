"""The provider's signing keys, cached per process: fetched when first needed, again when they
are older than MAAS_OIDC_JWKS_MAX_AGE, and at once (at most every MAAS_OIDC_JWKS_MIN_REFRESH
seconds) when a token names a key id the cache does not know, which is how a rotation shows, or
when its key does not verify a token, which is how a key regenerated under the same id shows.
A refetch that fails keeps the keys already known."""
import logging
import threading
import time

import jwt
import requests

from . import config

logger = logging.getLogger(__name__)


class UnknownKey(Exception):
    pass


class KeySet:
    def __init__(self):
        self._lock = threading.Lock()
        self._uri: str | None = None
        self._keys: dict[str | None, jwt.PyJWK] = {}
        self._fetched_at = 0.0

    def _load(self, uri: str) -> None:
        try:
            response = requests.get(uri, timeout=config.get("MAAS_OIDC_TIMEOUT"))
            response.raise_for_status()
            keys = {}
            for data in response.json().get("keys", []):
                if data.get("use", "sig") != "sig":
                    continue
                try:
                    keys[data.get("kid")] = jwt.PyJWK(data)
                except jwt.PyJWKError:
                    continue  # a key type or algorithm this process does not support
        except (requests.RequestException, ValueError) as exc:
            logger.warning("oidc.jwks_failed", extra={"uri": uri, "error": str(exc)})
            config.discovery_failed(f"jwks: {exc}")  # perhaps the provider moved its keys
            raise config.ProviderUnavailable(f"cannot read the provider's keys at {uri}") from exc
        self._uri, self._keys, self._fetched_at = uri, keys, time.monotonic()
        logger.info("oidc.jwks_loaded", extra={"uri": uri, "kids": sorted(map(str, keys))})

    def key_for(self, kid: str | None, *, stale: jwt.PyJWK | None = None) -> jwt.PyJWK:
        """The key of `kid`; `stale`, a key of it that failed to verify a token, is replaced by
        the provider's current one if the floor allows a refetch (else it comes back)."""
        uri = config.discovery()["jwks_uri"]
        with self._lock:
            age = time.monotonic() - self._fetched_at
            loaded = False
            if uri != self._uri or age > config.get("MAAS_OIDC_JWKS_MAX_AGE"):
                self._refresh(uri)
                loaded = True
            key = self._find(kid)
            if (key is None or key is stale) and not loaded \
                    and age >= config.get("MAAS_OIDC_JWKS_MIN_REFRESH"):
                self._load(uri)  # perhaps the keys were rotated, or one regenerated
                key = self._find(kid)
        if key is None:
            raise UnknownKey(kid)
        return key

    def _refresh(self, uri: str) -> None:
        """The periodic refetch: while the provider is down, the keys it published last go on
        verifying its tokens, and the next try waits MAAS_OIDC_JWKS_MIN_REFRESH seconds (not a
        fetch of MAAS_OIDC_TIMEOUT per request)."""
        try:
            self._load(uri)
        except config.ProviderUnavailable:
            if uri != self._uri or not self._keys:
                raise
            self._fetched_at = time.monotonic() - config.get("MAAS_OIDC_JWKS_MAX_AGE") \
                + config.get("MAAS_OIDC_JWKS_MIN_REFRESH")

    def _find(self, kid: str | None) -> jwt.PyJWK | None:
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        return self._keys.get(kid)

    def forget(self) -> None:
        with self._lock:
            self._uri, self._keys, self._fetched_at = None, {}, 0.0


keys = KeySet()
