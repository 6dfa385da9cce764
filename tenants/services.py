"""Service functions for tenants, members and quotas; each records a tenant config event."""
import logging
import math
from collections.abc import Callable
from typing import Protocol

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.utils import timezone

from core.context import Context
from core.errors import Conflict, Invalid, NotFound
from core.limits import display_name
from eventlog import log
from eventlog.models import ConfigEvent

from .limits import USAGE_LIMITS, breached
from .models import QUOTA_FIELDS, SLUG, Invitation, Membership, Role, Tenant, TenantQuota

logger = logging.getLogger(__name__)


class TenantSpaces(Protocol):
    """What tenant services need of a tenant's address spaces, which live in the layer above
    (config_service registers its implementation at start-up: `register_spaces`)."""

    def exist(self, tenant: Tenant) -> bool: ...

    def names(self, tenant: Tenant) -> list[str]: ...

    def delete_all(self, *, ctx: Context, tenant: Tenant) -> None:
        """Deletes every address space of a tenant being deleted, in the caller's
        transaction."""

    def wake_all(self, tenant: Tenant) -> None:
        """After commit, wakes the agents of every space of the tenant."""


_spaces: TenantSpaces | None = None


def register_spaces(spaces: TenantSpaces) -> None:
    global _spaces
    _spaces = spaces


def _tenant_spaces() -> TenantSpaces:
    if _spaces is None:
        raise RuntimeError("no address spaces registered: config_service is not installed")
    return _spaces


def _event(tenant: Tenant, type_name: str, payload: dict, ctx: Context):
    return log.append_tenant_event(tenant, type_name, payload, ctx=ctx)


@transaction.atomic
def create_tenant(*, ctx: Context, slug, owner, name: str = "") -> Tenant:
    if not isinstance(slug, str) or not SLUG.regex.match(slug):
        raise Invalid(SLUG.message, "metadata.name")
    name = display_name(name)
    taken = Tenant.objects.select_for_update().filter(slug=slug).first()
    if taken is not None and not _release_name(taken):
        raise Conflict(f"Tenant {slug!r} already exists." if taken.deleted_at is None else
                       f"Tenant {slug!r} is being deleted; its name is free once its address "
                       "spaces are gone.", "metadata.name")
    tenant = Tenant.objects.create(slug=slug, name=name or slug)
    TenantQuota.objects.create(tenant=tenant)
    log.open_tenant_stream(tenant)
    _event(tenant, "tenant.created", {"slug": slug, "name": tenant.name}, ctx)
    add_member(ctx=ctx, tenant=tenant, user=owner, role=Role.OWNER)
    return tenant


def _release_name(tenant: Tenant) -> bool:
    """Frees a deleted tenant's name once its address spaces are gone; True if freed.

    Done when the name is wanted again rather than by the finalizer, so that no lock of a
    space's stream is ever held while the tenant's stream is locked.
    """
    if tenant.deleted_at is None or _tenant_spaces().exist(tenant):
        return False
    tenant.slug = f"{tenant.slug}~{tenant.uid.hex[:12]}"
    tenant.save(update_fields=["slug"])
    return True


@transaction.atomic
def delete_tenant(*, ctx: Context, tenant: Tenant) -> list[str]:
    """Deletes a tenant; returns the names of the address spaces being torn down.

    Members lose access at once and pending invitations end. Every address space is deleted
    through the usual path (its agents tear down routers and brokers, then the finalizer drops
    it). The tenant's row stays, marked deleted, with its audit trail and usage history.
    """
    stream = log.lock_tenant_stream(tenant)
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    if tenant.deleted_at is not None:
        raise NotFound(f"Tenant {tenant.slug} is already being deleted.")
    spaces = _tenant_spaces().names(tenant)
    members = sorted(Membership.objects.filter(tenant=tenant)
                     .values_list("user__username", flat=True))
    tenant.deleted_at = timezone.now()
    tenant.save(update_fields=["deleted_at"])
    log.append_tenant_event(tenant, "tenant.deleted",
                            {"slug": tenant.slug, "members": members, "spaces": spaces},
                            ctx=ctx, stream=stream)
    Membership.objects.filter(tenant=tenant).delete()
    Invitation.objects.filter(tenant=tenant, accepted_at__isnull=True,
                              revoked_at__isnull=True).update(revoked_at=tenant.deleted_at)
    _tenant_spaces().delete_all(ctx=ctx, tenant=tenant)
    return spaces


@transaction.atomic
def add_member(*, ctx: Context, tenant: Tenant, user, role: str) -> Membership:
    if role not in Role.values:
        raise Invalid(f"role must be one of {', '.join(Role.values)}", "role")
    membership, created = Membership.objects.get_or_create(
        tenant=tenant, user=user, defaults={"role": role}
    )
    if created:
        _event(tenant, "tenant.member_added", {"username": user.get_username(), "role": role}, ctx)
    elif membership.role != role:
        membership.role = role
        membership.save(update_fields=["role"])
        _event(tenant, "tenant.member_role_changed",
               {"username": user.get_username(), "role": role}, ctx)
    return membership


def keep_an_owner(tenant: Tenant, username: str) -> None:
    """Refuses to leave a tenant without an owner (when `username` stops being one)."""
    owners = (Membership.objects.select_for_update(of=("self",)).select_related("user")
              .filter(tenant=tenant, role=Role.OWNER))
    if not [m for m in owners if m.user.get_username() != username]:
        raise Conflict("A tenant keeps at least one owner.", "spec.role")


@transaction.atomic
def remove_member(*, ctx: Context, tenant: Tenant, username: str) -> None:
    user = get_user_model().objects.filter(username=username).first()
    deleted, _ = Membership.objects.filter(tenant=tenant, user=user).delete()
    if not deleted:
        raise NotFound(f"{username} is not a member of {tenant.slug}.")
    _event(tenant, "tenant.member_removed", {"username": username}, ctx)


# The live re-evaluation of a tenant's quota (workers.usage.live_quota), registered by workers at
# start-up (workers/apps.py): tenants sits below workers and never imports it.
_evaluate_quota: Callable[[int], None] | None = None


def register_quota_evaluation(evaluate: Callable[[int], None]) -> None:
    """Installs `evaluate(tenant_id)`, called after commit of every quota change."""
    global _evaluate_quota
    _evaluate_quota = evaluate


def request_quota_evaluation(tenant: Tenant) -> bool:
    """After commit, has the tenant's usage today so far evaluated against its quota, throttling
    or releasing it; False when nothing is registered (the next usage job run evaluates it)."""
    evaluate, tenant_id = _evaluate_quota, tenant.pk
    if evaluate is None:
        logger.warning("quota.evaluation_unregistered", extra={"tenant": tenant.slug})
        return False
    transaction.on_commit(lambda: evaluate(tenant_id), robust=True)
    return True


def _check_limit(field: str, value) -> None:
    """A limit is null (none) or a non-negative number its column holds (credits: any finite
    number; the others: integers)."""
    if value is None:
        return
    if field == "max_credits":
        if isinstance(value, bool) or not isinstance(value, int | float) or not (
                math.isfinite(value) and value >= 0):
            raise Invalid("must be null (no limit) or a non-negative number", f"spec.{field}")
        return
    _, high = connection.ops.integer_field_range(
        TenantQuota._meta.get_field(field).get_internal_type())
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise Invalid(f"must be null (no limit) or an integer from 0 to {high}", f"spec.{field}")


@transaction.atomic
def set_quota(*, ctx: Context, tenant: Tenant, **limits) -> TenantQuota:
    """Sets some of the tenant's limits (None: no limit); the rest stay.

    Records `tenant.quota_changed` with the limits before and after, then has the tenant's usage
    today re-evaluated live. Nothing changes on an error; the same values again record nothing.
    """
    for field, value in limits.items():
        if field not in QUOTA_FIELDS:
            raise Invalid(f"unknown quota field; the limits are {', '.join(QUOTA_FIELDS)}",
                          f"spec.{field}")
        _check_limit(field, value)
    quota, _ = TenantQuota.objects.select_for_update().get_or_create(tenant=tenant)
    before = {f: getattr(quota, f) for f in QUOTA_FIELDS}
    if limits.get("max_credits") is not None:
        limits["max_credits"] = float(limits["max_credits"])
    after = {**before, **limits}
    if after == before:
        return quota
    for field, value in limits.items():
        setattr(quota, field, value)
    quota.save(update_fields=list(limits))
    _event(tenant, "tenant.quota_changed", {"quota": after, "previous": before}, ctx)
    if any(after[f] != before[f] for f in USAGE_LIMITS):
        request_quota_evaluation(tenant)
    return quota


@transaction.atomic
def throttle(*, ctx: Context, tenant: Tenant, limits: list[dict]) -> bool:
    """Throttles a tenant over quota (unless an operator override is active); True if changed.

    `limits` are the breached limits: [{"limit", "used", "limit_value"}]. Each is checked again
    against the tenant's limit now, since a caller may have measured against one an operator
    has changed since (the usage job reads them as it starts): only those still breached
    throttle. The routers of the tenant's standard spaces then refuse new senders, and the
    brokers of its brokered spaces publishing (docs/usage.md), without any restart.
    """
    quota, _ = TenantQuota.objects.select_for_update().get_or_create(tenant=tenant)
    if quota.override_until and quota.override_until > timezone.now():
        return False
    limits = [{**entry, "limit_value": getattr(quota, entry["limit"])} for entry in limits
              if entry["limit"] in USAGE_LIMITS
              and breached(entry["used"], getattr(quota, entry["limit"]))]
    if not limits or (quota.throttled and quota.throttled_limits == limits):
        return False
    quota.throttled, quota.throttled_limits = True, limits
    quota.save(update_fields=["throttled", "throttled_limits"])
    _event(tenant, "tenant.throttled", {"limits": limits, "action": quota.throttle_action}, ctx)
    _tenant_spaces().wake_all(tenant)  # enforced by the routers and the brokers
    return True


@transaction.atomic
def unthrottle(*, ctx: Context, tenant: Tenant, reason: str, override_until=None,
               measured_before=None) -> bool:
    """Lifts a throttle: usage is back under quota, or an operator overrides it.

    `measured_before`: when the caller's usage figures were read (the usage job: as its run
    began). A throttle decided later, on newer figures (a live evaluation), then stays.
    """
    quota, _ = TenantQuota.objects.select_for_update().get_or_create(tenant=tenant)
    if override_until is not None:
        quota.override_until = override_until
        quota.save(update_fields=["override_until"])
    if not quota.throttled:
        return False
    if measured_before is not None and _throttled_after(tenant, measured_before):
        return False
    quota.throttled, quota.throttled_limits = False, []
    quota.save(update_fields=["throttled", "throttled_limits"])
    _event(tenant, "tenant.unthrottled", {"reason": reason}, ctx)
    _tenant_spaces().wake_all(tenant)  # enforced by the routers and the brokers
    return True


def _throttled_after(tenant: Tenant, moment) -> bool:
    """Whether the tenant's current throttle (its last tenant.throttled) was decided after."""
    at = (ConfigEvent.objects.filter(tenant=tenant, type="tenant.throttled")
          .order_by("-position").values_list("created_at", flat=True).first())
    return at is not None and at > moment
