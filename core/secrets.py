"""Secrets a tenant hands the API (a certBundle's private key), sealed before they are stored or
written to the config log: Fernet with a key derived from SECRET_KEY, so a copy of the database
or of the log alone reveals none of them."""
import base64
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

SEALED = "sealed:"  # what a sealed value starts with, so it is never taken for a plain one


def seal(value: str) -> str:
    return SEALED + _fernet(settings.SECRET_KEY).encrypt(value.encode()).decode("ascii")


def is_sealed(value) -> bool:
    return isinstance(value, str) and value.startswith(SEALED)


def unseal(sealed: str) -> str | None:
    """The value, or None if it does not open (another SECRET_KEY, or not sealed)."""
    if not is_sealed(sealed):
        return None
    try:
        token = sealed[len(SEALED):].encode("ascii")
        return _fernet(settings.SECRET_KEY).decrypt(token).decode()
    except (InvalidToken, UnicodeError):
        return None


@lru_cache(maxsize=4)
def _fernet(secret_key: str) -> Fernet:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
               info=b"maas tenant secrets at rest").derive(secret_key.encode())
    return Fernet(base64.urlsafe_b64encode(key))
