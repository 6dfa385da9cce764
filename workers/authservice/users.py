"""The auth service's verifier: messaging users from the database (salted RabbitMQ-style
hashes) and the router admin, as the identities routers' vhost policies name.

No address-authz: qdrouterd 1.19 turns anonymous senders on for a connection whose
permissions come from the auth service and checks their messages' `to` as written, but routes
it after dropping a `scheme:/` head, so a prefix grant (`news/*`) would reach the router's own
`_local/$management`. The agent's per-space vhost policy carries the address rules instead
(anonymous senders off), on qdrouterd and the embedded router alike (docs/router.md)."""
import hmac

from django.conf import settings
from django.db import close_old_connections, connection

from config_service.models import MessagingUser
from config_service.passwords import verify_password

from .server import Identity


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
    return Identity(sub=user, preferred_username=user)


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
    return Identity(sub=f"{user.username}@{user.space.vhost}", preferred_username=user.username)

