"""The provider's signing keys, cached per process: fetched when first needed, again when they
are older than MAAS_OIDC_JWKS_MAX_AGE, and at once (at most every MAAS_OIDC_JWKS_MIN_REFRESH
seconds) when a token names a key id the cache does not know, which is how a rotation shows."""
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

    def key_for(self, kid: str | None) -> jwt.PyJWK:
        uri = config.discovery()["jwks_uri"]
        with self._lock:
            age = time.monotonic() - self._fetched_at
            loaded = False
            if uri != self._uri or age > config.get("MAAS_OIDC_JWKS_MAX_AGE"):
                self._load(uri)
                loaded = True
            key = self._find(kid)
            if key is None and not loaded and age >= config.get("MAAS_OIDC_JWKS_MIN_REFRESH"):
                self._load(uri)  # an unknown kid: perhaps the keys were rotated
                key = self._find(kid)
        if key is None:
            raise UnknownKey(kid)
        return key

    def _find(self, kid: str | None) -> jwt.PyJWK | None:
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        return self._keys.get(kid)

    def forget(self) -> None:
        with self._lock:
            self._uri, self._keys, self._fetched_at = None, {}, 0.0


keys = KeySet()
