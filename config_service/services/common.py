"""What every service function of an address space does: append its event, check the
version the writer read, lock the space's stream and read it again under the lock, read the
tenant's quota."""

from core.context import Context
from core.errors import Conflict, NotFound
from eventlog import log
from eventlog.models import EventStream
from tenants.models import Tenant, TenantQuota

from .. import statements
from ..models import AddressSpace

# append_event, check_version, locked_space, refuse_if_terminating, space_quota, tenant_quota
# address_plan_status, fits_space, schedule_pending_addresses, space_plan_status, space_usage, tenant_credits, try_place, usage_groups



def append_event(stream, type_name, payload, ctx: Context, space=None):
    return log.append(stream, type_name, payload, actor=ctx.actor, request_id=ctx.request_id,
                      space=space)


def check_version(current: int, expected: int | None) -> None:
    if expected is not None and int(expected) != current:
        raise Conflict(
            f"resourceVersion {expected} is stale; the current one is {current}. Read the object "
            "again and retry.",
            "metadata.resourceVersion",
        )


def locked_space(space: AddressSpace) -> tuple[EventStream, AddressSpace]:
    """The space's stream, locked, and the space read again under that lock, with its tenant
    and the tenant's quota (`space_quota`)."""
    stream = statements.lock_stream(space.uid)
    space = statements.space_with_quota(space.uid) if stream is not None else None
    if space is None:
        raise NotFound("No such address space.")
    return stream, space


def tenant_quota(tenant: Tenant) -> TenantQuota:
    quota, _ = TenantQuota.objects.get_or_create(tenant=tenant)
    return quota


def space_quota(space: AddressSpace) -> TenantQuota:
    """The quota of a space `locked_space` returned: read with it, so no query unless the
    tenant has no quota row yet."""
    try:
        return space.tenant.quota
    except TenantQuota.DoesNotExist:
        return tenant_quota(space.tenant)


def refuse_if_terminating(space: AddressSpace) -> None:
    if space.terminating:
        raise Conflict(f"Address space {space.name} is being deleted.", "metadata.name")
