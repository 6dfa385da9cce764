"""Password hashes in RabbitMQ's `rabbit_password_hashing_sha256` format.

base64(4-byte salt + sha256(salt + utf8 password)): the control plane can push the same hash
to RabbitMQ and to the router, so neither ever stores a clear-text password.
"""

import base64
import hashlib
import hmac
import os


def hash_password(password: str, salt: bytes | None = None) -> str:
    salt = os.urandom(4) if salt is None else salt
    digest = hashlib.sha256(salt + password.encode("utf-8")).digest()
    return base64.b64encode(salt + digest).decode("ascii")


def check_password(password: str, password_hash: str) -> bool:
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except (ValueError, TypeError):
        return False
    if len(raw) != 36:
        return False
    salt, expected = raw[:4], raw[4:]
    digest = hashlib.sha256(salt + password.encode("utf-8")).digest()
    return hmac.compare_digest(digest, expected)


def is_valid_hash(password_hash: str) -> bool:
    try:
        return len(base64.b64decode(password_hash, validate=True)) == 36
    except (ValueError, TypeError):
        return False
