"""Salted SHA-256 password hashes in RabbitMQ's format (rabbit_password_hashing_sha256).

The same hash is handed to RabbitMQ (brokered spaces) and to routers, so a messaging user's
password is never stored or sent in the clear: base64(salt[4] + sha256(salt[4] + password)).
"""
import base64
import hashlib
import hmac
import os


def hash_password(password: str, salt: bytes | None = None) -> str:
    salt = os.urandom(4) if salt is None else salt
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


def verify_password(password: str, hashed: str) -> bool:
    try:
        raw = base64.b64decode(hashed, validate=True)
    except ValueError:
        return False
    return len(raw) == 36 and hmac.compare_digest(hash_password(password, raw[:4]), hashed)
