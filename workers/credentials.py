"""Random credentials of the data plane's internal users, made on first use, kept encrypted.

Nothing here is derived from the secret key or a constant: each credential is random and
stored in `InfraCredential`, encrypted with a key derived from SECRET_KEY (Fernet), so a copy of
the database alone reveals none of them. `rotate` gives credentials new values and a new
generation; the agents then carry them to the routers and brokers (`manage.py rotate_secrets`).
A credential that no longer decrypts (SECRET_KEY lost with `var/`) is replaced by a new one on
first use and logged, and the space whose login it is woken: the agents push it out as after a
rotation (docs/security.md).
"""
import base64
import logging
import secrets
from dataclasses import dataclass
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from config_service.models import AddressSpace
from workers.dispatch import notify_space
from workers.models import InfraCredential

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Credential:
    value: str
    generation: int


ROUTER_BROKER = "router-broker:"


def router_broker_name(vhost: str) -> str:
    """The router's password on a space's broker vhost."""
    return f"{ROUTER_BROKER}{vhost}"


def infra_name(purpose: str, infra: str) -> str:
    """A per-space secret of the Kubernetes backend (`broker-admin`, `erlang-cookie`)."""
    return f"{purpose}:{infra}"


def get(name: str) -> Credential:
    """The credential `name`, made at random if there is none yet."""
    # By hand: every reconcile of a standard space reads the router's login, and the ORM's
    # building of this read cost more CPU than PostgreSQL's answering it (core/rows.py).
    with connection.cursor() as cursor:
        cursor.execute(_READ, [name])
        row = cursor.fetchone()
    if row is None:
        made, _ = InfraCredential.objects.get_or_create(
            name=name, defaults={"ciphertext": _encrypt(_new_value())})
        row = (made.ciphertext, made.generation)
    ciphertext, generation = row
    value = _decrypt(ciphertext)
    if value is None:
        return _replace_unreadable(name)
    return Credential(value, generation)


_READ = (f"SELECT ciphertext, generation FROM {InfraCredential._meta.db_table} "
         "WHERE name = %s")


def value(name: str) -> str:
    return get(name).value


def rotate(prefix: str = "", *, exact: bool = False) -> list[str]:
    """New values for every credential whose name starts with `prefix` (is `prefix`, with
    `exact`); returns their names."""
    rotated = []
    rows = InfraCredential.objects.select_for_update()
    rows = rows.filter(name=prefix) if exact else rows.filter(name__startswith=prefix)
    with transaction.atomic():
        for row in rows:
            row.ciphertext = _encrypt(_new_value())
            row.generation += 1
            row.rotated_at = timezone.now()
            row.save(update_fields=["ciphertext", "generation", "rotated_at"])
            rotated.append(row.name)
    logger.info("credentials.rotated", extra={"prefix": prefix, "n_rotated": len(rotated)})
    return rotated


def forget(name: str) -> None:
    """Drops a credential whose user is gone (its space was torn down)."""
    InfraCredential.objects.filter(name=name).delete()


def _replace_unreadable(name: str) -> Credential:
    with transaction.atomic():
        row = InfraCredential.objects.select_for_update().get(name=name)
        current = _decrypt(row.ciphertext)
        if current is not None:  # another process replaced it first
            return Credential(current, row.generation)
        logger.warning("credentials.unreadable_replaced", extra={"credential": name})
        new = _new_value()
        row.ciphertext, row.generation = _encrypt(new), row.generation + 1
        row.rotated_at = timezone.now()
        row.save(update_fields=["ciphertext", "generation", "rotated_at"])
        transaction.on_commit(lambda: _wake_owner(name), robust=True)
        return Credential(new, row.generation)


def _wake_owner(name: str) -> None:
    """Wakes the agents of the space whose router login `name` is, as `rotate_secrets` does:
    the router agent that replaced it gives its connector the new login at once, but only the
    storage controller tells RabbitMQ, and with every event applied it would wait for the
    space's drift check (at 100k after a lost key, not converged after 17 minutes that way:
    docs/scale.md, "A lost secret key at 100k")."""
    if not name.startswith(ROUTER_BROKER):
        return
    slug, _, space = name.removeprefix(ROUTER_BROKER).partition(".")
    uid = (AddressSpace.objects.filter(tenant__slug=slug, name=space)
           .values_list("uid", flat=True).first())
    if uid is not None:
        notify_space(uid)


def _new_value() -> str:
    return secrets.token_urlsafe(32)


def _fernet() -> Fernet:
    return _fernet_of(settings.SECRET_KEY)


@lru_cache(maxsize=4)
def _fernet_of(secret_key: str) -> Fernet:
    # Derived once per key and process, not per credential read; keyed by the secret key,
    # so a changed SECRET_KEY (a restart with another var/, tests) derives anew.
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
               info=b"maas infra credentials at rest").derive(secret_key.encode())
    return Fernet(base64.urlsafe_b64encode(key))


def _encrypt(value: str) -> str:
    return _fernet().encrypt(value.encode()).decode("ascii")


def encrypt(value: str) -> str:
    """`value` encrypted as the credentials are (workers/certificates.py keeps its CAs so)."""
    return _encrypt(value)


def decrypt(ciphertext: str) -> str | None:
    """The value, or None if it no longer decrypts (SECRET_KEY changed)."""
    return _decrypt(ciphertext)


def _decrypt(ciphertext: str) -> str | None:
    try:
        return _fernet().decrypt(ciphertext.encode("ascii")).decode()
    except InvalidToken:
        return None


def router_broker(vhost: str) -> tuple[str, str]:
    """(username, password) of the router on a space's broker vhost. The username carries the
    generation, so a rotated credential is a new broker user and a new router connector: the
    router cannot report a connector's password, only its username."""
    credential = get(router_broker_name(vhost))
    return f"$router-{credential.generation}", credential.value
