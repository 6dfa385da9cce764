"""The auth service's verifier: messaging users from the database (salted RabbitMQ-style
hashes) and the router admin, as identities with qdrouterd address-authz."""
import hmac

from django.conf import settings
from django.db import close_old_connections, connection

from config_service.models import MessagingUser
from config_service.passwords import verify_password

from .server import Identity

# What the router admin may do: send management requests; its replies come to a dynamic
# receiver, which the router allows to anyone the auth service authenticated.
ADMIN_AUTHZ = {"$management": ["send"]}
_GRANTS = {"send": ("send",), "recv": ("recv",), "manage": ("send", "recv")}


def verify(login: str, password: str) -> Identity | None:
    """The identity of `user@vhost`, of a bare `user` whose password matches in exactly one
    space, or of the router admin; None if the login is refused."""
    close_old_connections()
    try:
        return _admin(login, password) or _messaging_user(login, password)
    finally:
        connection.close()  # each login runs in a thread of its own, which then ends


def _admin(login: str, password: str) -> Identity | None:
    user, secret = settings.MAAS_ROUTER_ADMIN_USER, settings.MAAS_ROUTER_ADMIN_PASSWORD
    if not user or not secret or login != user:
        return None
    if not hmac.compare_digest(password.encode("utf-8"), secret.encode("utf-8")):
        return None
    return Identity(sub=user, preferred_username=user, address_authz=dict(ADMIN_AUTHZ))


def _messaging_user(login: str, password: str) -> Identity | None:
    username, at, vhost = login.rpartition("@")
    users = MessagingUser.objects.select_related("space__tenant").filter(
        space__terminating=False, space__tenant__deleted_at__isnull=True)
    if at:
        slug, dot, space = vhost.partition(".")  # neither slugs nor space names have a dot
        if not dot:
            return None
        users = users.filter(username=username, space__tenant__slug=slug, space__name=space)
    else:
        users = users.filter(username=login)
    # A bare login names nobody if its password fits users of several spaces.
    matching = [u for u in users if verify_password(password, u.password_hash)]
    if len(matching) != 1:
        return None
    user = matching[0]
    return Identity(sub=f"{user.username}@{user.space.vhost}", preferred_username=user.username,
                    address_authz=address_authz(user.authorization))


def address_authz(rules: list[dict]) -> dict[str, list[str]]:
    """A user's authorization rules as qdrouterd address-authz: send -> send, recv -> recv,
    manage -> both, view -> nothing; no addresses means every address ("*"). Patterns that
    name the router's own addresses are left out."""
    authz: dict[str, list[str]] = {}
    for rule in rules:
        grants = [g for op in rule.get("operations", ()) for g in _GRANTS.get(op, ())]
        if not grants:
            continue
        for pattern in rule.get("addresses") or ["*"]:
            if names_router_internals(pattern):
                continue
            have = authz.setdefault(pattern, [])
            have += [g for g in ("send", "recv") if g in grants and g not in have]
    return authz


def names_router_internals(pattern: str) -> bool:
    """`$management`, `_local/...`, `_topo/...`, directly or behind what qdrouterd strips
    before routing (a leading `/`, a `scheme:/` or `//host/` head): never a tenant's."""
    return pattern.startswith(("$", "_", "/")) or ":/" in pattern
