"""Salted SHA-256 password hashes in RabbitMQ's format (rabbit_password_hashing_sha256).

The same hash is handed to RabbitMQ (brokered spaces) and to routers, so a messaging user's
password is never stored or sent in the clear: base64(salt[4] + sha256(salt[4] + password)).
No Django imports: the storage controller and the embedded router use this module too.
"""
import base64
import hashlib
import hmac
import os

_LENGTH = 4 + 32  # salt + sha256 digest


def hash_password(password: str, salt: bytes | None = None) -> str:
    salt = os.urandom(4) if salt is None else salt
    if len(salt) != 4:
        raise ValueError("the salt must be 4 bytes")
    digest = hashlib.sha256(salt + password.encode("utf-8")).digest()
    return base64.b64encode(salt + digest).decode("ascii")


def _decoded(hashed: str) -> bytes | None:
    try:
        raw = base64.b64decode(hashed, validate=True)
    except (ValueError, TypeError):
        return None
    return raw if len(raw) == _LENGTH else None


def is_valid_hash(hashed: str) -> bool:
    return _decoded(hashed) is not None


def verify_password(password: str, hashed: str) -> bool:
    raw = _decoded(hashed)
    return raw is not None and hmac.compare_digest(hash_password(password, raw[:4]), hashed)
