"""Users from claims: the first sign-in provisions the user, every sign-in applies the claims'
memberships and operator flag through the tenant service functions (so each change is a config
event) and accepts the invitations of a verified email address. A bearer access token only finds
the user a sign-in provisioned (user_for_access_token) and writes nothing."""
import hashlib
import json
import logging

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from core.context import Context
from tenants import invitations
from tenants.models import Membership, Tenant
from tenants.services import add_member, remove_member

from . import claims as mapping
from . import config
from .models import OidcIdentity

logger = logging.getLogger(__name__)


def _digest(issuer: str, roles: dict, staff, claims: dict) -> str:
    seen = {"issuer": issuer, "roles": roles, "staff": staff,
            "email": claims.get("email", ""), "name": claims.get("name", "")}
    return hashlib.sha256(json.dumps(seen, sort_keys=True).encode()).hexdigest()


def _free_username(wanted: str, subject: str) -> str:
    User = get_user_model()
    if not User.objects.filter(username=wanted).exists():
        return wanted
    return f"{wanted[:140]}-{hashlib.sha256(subject.encode()).hexdigest()[:8]}"


def _find_or_create_user(issuer: str, claims: dict):
    """The user linked to (issuer, sub); else an invited user of that name not yet linked
    (created by a tenant owner in the product, no password); else a new user."""
    User = get_user_model()
    name = mapping.username(claims)
    invited = (User.objects.filter(username=name, oidc_identities__isnull=True)
               .select_for_update(of=("self",)).first())
    if invited is not None and not invited.has_usable_password():
        return invited
    return User.objects.create_user(_free_username(name, claims["sub"]),
                                    email=claims.get("email", ""))


@transaction.atomic
def user_for_claims(claims: dict, *, request_id: str = "", force: bool = True):
    """The user the claims name, provisioned and brought up to date with them.

    `force` (a browser sign-in) applies the claims even when they map as before, which also
    repairs memberships that were changed in between; a session refresh passes force=False.
    Never called for an API access token (user_for_access_token).
    """
    issuer = config.issuer()
    roles = mapping.tenant_roles(claims)
    staff = mapping.is_staff(claims)
    digest = _digest(issuer, roles, staff, claims)
    identity = (OidcIdentity.objects.select_related("user").select_for_update()
                .filter(issuer=issuer, subject=claims["sub"]).first())
    if identity is not None and identity.claims_digest == digest and not force:
        return identity.user
    if identity is None:
        user = _find_or_create_user(issuer, claims)
        identity = OidcIdentity.objects.create(user=user, issuer=issuer, subject=claims["sub"])
        logger.info("oidc.user_provisioned", extra={"username": user.get_username()})
    user = identity.user
    changed = []
    if claims.get("email") and user.email != claims["email"]:
        user.email = claims["email"]
        changed.append("email")
    if staff is not None and user.is_staff != staff:
        user.is_staff = staff
        changed.append("is_staff")
    if changed:
        user.save(update_fields=changed)
    ctx = Context(actor=f"oidc-claims:{user.get_username()}", request_id=request_id)
    identity.claim_roles = _apply_roles(user, roles, identity.claim_roles or {}, ctx)
    if claims.get("email_verified") is True and claims.get("email"):
        # The provider vouches for the address: the invitations of it are this person's.
        invitations.accept_for_verified_email(user, claims["email"], ctx)
    identity.claims_digest = digest
    identity.last_sign_in = timezone.now()
    identity.save(update_fields=["claim_roles", "claims_digest", "last_sign_in"])
    return user


class NotSignedIn(Exception):
    """A valid access token of a subject that never signed in here: no user to act as."""


def user_for_access_token(claims: dict):
    """The user of a bearer access token, by (issuer, sub) as a sign-in linked it; NotSignedIn
    when there is none. Never creates a user nor changes memberships or the staff flag: an
    access token may carry no identity claims at all (RFC 9068 requires none), so what it does
    not say is no evidence of a removed group."""
    identity = (OidcIdentity.objects.select_related("user")
                .filter(issuer=config.issuer(), subject=claims["sub"]).first())
    if identity is None:
        raise NotSignedIn(claims["sub"])
    return identity.user


def _apply_roles(user, roles: dict[str, str], previous: dict[str, str], ctx: Context) -> dict:
    """Makes the memberships follow the claims; returns what the claims granted.

    For a tenant the claims name, a membership the claims granted before follows them; one made
    in the product is only ever raised, never lowered. A membership the claims granted before and
    no longer name is removed, unless it was changed in the product since.
    """
    tenants = {t.slug: t for t in Tenant.objects.live().filter(slug__in=set(roles) | set(previous))}
    current = {m.tenant.slug: m.role for m in
               Membership.objects.filter(user=user, tenant__in=tenants.values())
               .select_related("tenant")}
    granted = {}
    for slug, role in sorted(roles.items()):
        tenant = tenants.get(slug)
        if tenant is None:
            logger.info("oidc.unknown_tenant", extra={"tenant": slug,
                                                      "username": user.get_username()})
            continue
        have = current.get(slug)
        if have is None or previous.get(slug) == have or mapping.RANK[role] > mapping.RANK[have]:
            add_member(ctx=ctx, tenant=tenant, user=user, role=role)
        granted[slug] = role
    for slug, role in sorted(previous.items()):
        if slug not in roles and slug in tenants and current.get(slug) == role:
            remove_member(ctx=ctx, tenant=tenants[slug], username=user.get_username())
    return granted
