"""Service functions of messaging users: create, update (password, rules), delete."""

from django.db import transaction

from core.context import Context
from core.errors import Conflict, Invalid, NotFound, QuotaExceeded

from .. import validation
from ..models import AddressSpace, MessagingUser
from ..passwords import hash_password
from .common import append_event, check_version, locked_space, refuse_if_terminating, space_quota


@transaction.atomic
def create_messaging_user(*, ctx: Context, space: AddressSpace, name=None, username=None,
                          authentication=None, authorization=None):
    stream, space = locked_space(space)
    refuse_if_terminating(space)
    username = validation.username(username)
    name = validation.resource_name(name, space.name, "MessagingUser", username)
    if name != f"{space.name}.{username}".lower() and not name.startswith(f"{space.name}."):
        raise Invalid("metadata.name must be <space>.<username>", "metadata.name")
    clear = validation.password(authentication)
    if clear is None:
        raise Invalid("a password is required", "spec.authentication.password")
    rules = validation.authorization(authorization, space.type)
    if MessagingUser.objects.filter(space=space, username=username).exists():
        raise Conflict(f"User {username!r} already exists in {space.name}", "spec.username")
    if MessagingUser.objects.filter(space=space, name=name).exists():
        raise Conflict(f"MessagingUser {name!r} already exists", "metadata.name")
    quota = space_quota(space)
    if quota.max_messaging_users is not None and MessagingUser.objects.filter(
        space__tenant=space.tenant
    ).count() >= quota.max_messaging_users:
        raise QuotaExceeded(
            f"Tenant quota of {quota.max_messaging_users} messaging users reached.",
            "spec.username",
        )
    append_event(stream, "messaging_user.created", {
        "name": name, "username": username, "password_hash": hash_password(clear),
        "authorization": rules,
    }, ctx)
    return MessagingUser.objects.get(space=space, name=name)


@transaction.atomic
def update_messaging_user(*, ctx: Context, space: AddressSpace, name, username=None,
                          authentication=None, authorization=None, expected_version=None):
    stream, space = locked_space(space)
    refuse_if_terminating(space)
    current = MessagingUser.objects.filter(space=space, name=name).first()
    if current is None:
        raise NotFound(f"No messaging user {name!r} in {space.name}.")
    check_version(current.resource_version, expected_version)
    if username is not None and username != current.username:
        raise Invalid("spec.username cannot be changed", "spec.username")
    clear = validation.password(authentication)
    rules = (current.authorization if authorization is None
             else validation.authorization(authorization, space.type))
    password_hash = current.password_hash if clear is None else hash_password(clear)
    if password_hash == current.password_hash and rules == current.authorization:
        return current
    append_event(stream, "messaging_user.updated",
            {"name": name, "password_hash": password_hash, "authorization": rules}, ctx)
    return MessagingUser.objects.get(space=space, name=name)


@transaction.atomic
def delete_messaging_user(*, ctx: Context, space: AddressSpace, name, expected_version=None):
    stream, space = locked_space(space)
    current = MessagingUser.objects.filter(space=space, name=name).first()
    if current is None:
        raise NotFound(f"No messaging user {name!r} in {space.name}.")
    check_version(current.resource_version, expected_version)
    append_event(stream, "messaging_user.deleted", {"name": name}, ctx)
