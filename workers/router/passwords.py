"""Password hashes in RabbitMQ's `rabbit_password_hashing_sha256` format, shared with the
control plane (config_service.passwords has no Django imports): the control plane pushes the
same hash to RabbitMQ and to the router, so neither stores a clear-text password."""

from config_service.passwords import hash_password, is_valid_hash
from config_service.passwords import verify_password as check_password

__all__ = ["check_password", "hash_password", "is_valid_hash"]
