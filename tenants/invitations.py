"""Invitations by email: an owner invites an address to a role, the link is mailed (and shown
once), and the person accepts it signed in with that address, or at once at a sign-in whose
provider vouches for the address. Each step is a tenant config event."""
import datetime
import hashlib
import logging
import secrets

from django.conf import settings
from django.core import mail
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.utils import timezone

from core.context import Context
from core.errors import Conflict, Invalid, NotFound, ServiceError
from eventlog import log

from .models import Invitation, Membership, Role, Tenant
from .roles import RANK
from .services import add_member

logger = logging.getLogger(__name__)
TOKEN_PREFIX = "maas_inv_"


class Refused(ServiceError):
    """The invitation exists but is not for the signed-in person."""

    status = 403
    code = "invitation_refused"


class Gone(ServiceError):
    """The invitation was accepted, revoked or expired."""

    status = 410
    code = "invitation_gone"


def digest_of(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _event(tenant: Tenant, type_name: str, payload: dict, ctx: Context) -> None:
    log.append_tenant_event(tenant, type_name, payload, ctx=ctx)


def normalise_email(email) -> str:
    if not isinstance(email, str):
        raise Invalid("an email address is required", "spec.email")
    email = email.strip()
    try:
        validate_email(email)
    except ValidationError:
        raise Invalid(f"{email!r} is not an email address", "spec.email") from None
    local, _, domain = email.rpartition("@")
    return f"{local}@{domain.lower()}"


@transaction.atomic
def invite(*, ctx: Context, tenant: Tenant, email, role, invited_by) -> tuple[Invitation, str]:
    """A new invitation and its token (returned once, never stored).

    Inviting an address again replaces its pending invitation, which is how a link is resent.
    """
    email = normalise_email(email)
    if role not in Role.values:
        raise Invalid(f"role must be one of {', '.join(Role.values)}", "spec.role")
    if Membership.objects.filter(tenant=tenant, user__email__iexact=email).exists():
        raise Conflict(f"{email} is already a member of {tenant.slug}.", "spec.email")
    for old in pending(tenant).filter(email__iexact=email):
        revoke(ctx=ctx, invitation=old)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    days = getattr(settings, "MAAS_INVITATION_DAYS", 7)
    invitation = Invitation.objects.create(
        tenant=tenant, email=email, role=role, digest=digest_of(token), invited_by=invited_by,
        expires_at=timezone.now() + datetime.timedelta(days=days))
    _event(tenant, "tenant.invitation_created", {
        "id": str(invitation.uid), "email": email, "role": role,
        "expires_at": invitation.expires_at.isoformat()}, ctx)
    return invitation, token


def pending(tenant: Tenant):
    return Invitation.objects.filter(tenant=tenant, accepted_at__isnull=True,
                                     revoked_at__isnull=True, expires_at__gt=timezone.now())


@transaction.atomic
def revoke(*, ctx: Context, invitation: Invitation) -> None:
    invitation = _locked(invitation)
    if invitation.phase(timezone.now()) != Invitation.PENDING:
        raise Gone(f"The invitation of {invitation.email} is {invitation.phase(timezone.now())}.")
    invitation.revoked_at = timezone.now()
    invitation.save(update_fields=["revoked_at"])
    _event(invitation.tenant, "tenant.invitation_revoked",
           {"id": str(invitation.uid), "email": invitation.email}, ctx)


def _locked(invitation: Invitation) -> Invitation:
    """The invitation's row, locked after its tenant's stream: the order delete_tenant takes
    them in, so the two never wait on each other."""
    log.lock_tenant_stream(invitation.tenant)
    return (Invitation.objects.select_for_update(of=("self",)).select_related("tenant")
            .get(pk=invitation.pk))


def find(token: str) -> Invitation:
    invitation = (Invitation.objects.select_related("tenant", "invited_by")
                  .filter(digest=digest_of(token or "")).first())
    if invitation is None or invitation.tenant.deleted_at is not None:
        raise NotFound("No such invitation.")
    return invitation


@transaction.atomic
def accept(*, ctx: Context, invitation: Invitation, user) -> Membership:
    """Makes `user` a member; their email must be the invited one.

    A member already holding a higher role keeps it: an invitation never lowers a role.
    """
    invitation = _locked(invitation)
    now = timezone.now()
    if invitation.phase(now) != Invitation.PENDING:
        raise Gone(f"This invitation is {invitation.phase(now).lower()}; ask an owner of "
                   f"{invitation.tenant.slug} for a new one.")
    if (user.email or "").lower() != invitation.email.lower():
        raise Refused(f"This invitation is for {invitation.email}, and you are signed in as "
                      f"{user.email or 'someone without an email address'}. Sign in with that "
                      "address, or ask an owner to invite yours.")
    tenant = invitation.tenant
    current = Membership.objects.filter(tenant=tenant, user=user).first()
    role = invitation.role
    if current is not None and RANK[current.role] >= RANK[role]:
        membership = current
    else:
        membership = add_member(ctx=ctx, tenant=tenant, user=user, role=role)
    invitation.accepted_at, invitation.accepted_by = now, user
    invitation.save(update_fields=["accepted_at", "accepted_by"])
    _event(tenant, "tenant.invitation_accepted", {
        "id": str(invitation.uid), "email": invitation.email, "role": membership.role,
        "username": user.get_username()}, ctx)
    return membership


def accept_for_verified_email(user, email: str, ctx: Context) -> list[Membership]:
    """At a sign-in whose provider verified `email`: accepts every invitation of it."""
    invitations = Invitation.objects.filter(email__iexact=email, accepted_at__isnull=True,
                                            revoked_at__isnull=True,
                                            expires_at__gt=timezone.now(),
                                            tenant__deleted_at__isnull=True)
    accepted = []
    for invitation in invitations:
        try:
            accepted.append(accept(ctx=ctx, invitation=invitation, user=user))
        except ServiceError as exc:  # raced with a revoke: the others still count
            logger.info("invitation.not_accepted", extra={"reason": exc.message})
    return accepted


def send(invitation: Invitation, link: str) -> bool:
    """Mails the link; False (and logged) when the mail server refused or is unreachable."""
    inviter = invitation.invited_by.get_username() if invitation.invited_by else "An owner"
    subject = f"You are invited to {invitation.tenant.slug} on MaaS"
    body = (f"{inviter} invites you to the tenant {invitation.tenant.slug} as {invitation.role}."
            f"\n\nSign in with this address ({invitation.email}) and open:\n{link}\n\n"
            f"The link works until {invitation.expires_at:%Y-%m-%d %H:%M} UTC.")
    try:
        mail.send_mail(subject, body, None, [invitation.email])
        return True
    except OSError as exc:  # smtplib's errors are OSErrors too
        logger.warning("invitation.mail_failed", extra={"email": invitation.email,
                                                        "error": str(exc)})
        return False
