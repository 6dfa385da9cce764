"""Placement of addresses by credits (EnMasse's AddressProvisioner, `scheduling`): what a
space's and a tenant's addresses use, whether one more fits the space plan and the tenant's
credits, and the scheduling of Pending addresses once they fit."""
from collections import defaultdict

from django.db.models import Count

from core.context import Context
from tenants.models import AddressPlan, AddressSpacePlan, Tenant, TenantQuota

from .. import scheduling, statements
from ..models import Address, AddressSpace
from .common import (
    append_event,
    tenant_quota,
)

# address_plan_status, fits_space, schedule_pending_addresses, space_plan_status, space_usage, tenant_credits, try_place, usage_groups



def space_plan_status(plan: AddressSpacePlan) -> dict:
    return {"name": plan.name, "resourceLimits": plan.resource_limits}


def address_plan_status(plan: AddressPlan) -> dict:
    return {
        "name": plan.name,
        "partitions": plan.partitions,
        "resources": plan.resources,
        "messageTtl": plan.message_ttl,
        "messageRedelivery": plan.message_redelivery,
    }


USAGE_GROUP = ("type", "plan_status__resources", "placement")


def usage_groups(addresses, *by: str):
    """(*by, type, resources, placement, count) of scheduled addresses: the database groups
    them (a space's addresses share a few plans) instead of sending every row."""
    return (
        addresses.filter(scheduled=True)
        .values_list(*by, *USAGE_GROUP)
        .annotate(n=Count("id"))
        .order_by()
    )


def space_usage(space: AddressSpace, exclude: str | None = None) -> scheduling.Usage:
    return scheduling.usage_of_groups(statements.usage_groups(space.pk, exclude or ""))


def tenant_credits(tenant: Tenant, exclude_space: AddressSpace) -> float:
    """Credits needed by the tenant's other spaces, each counted on its own (one query)."""
    groups = defaultdict(list)
    others = Address.objects.filter(space__tenant=tenant).exclude(space_id=exclude_space.pk)
    for space_id, *group in usage_groups(others, "space_id"):
        groups[space_id].append(group)
    total = 0.0
    for space_groups in groups.values():
        needed = scheduling.usage_of_groups(space_groups).needed()
        total += needed["router"] + needed["broker"]
    return total


def fits_space(space: AddressSpace, usage: scheduling.Usage, quota: TenantQuota | None = None,
          others: float | None = None) -> bool:
    """Whether `usage` fits the space's plan and the tenant's credits; `others`: the credits
    of the tenant's other spaces, if already read (a batch reads them once)."""
    if not scheduling.fits(usage, space.plan_status.get("resourceLimits", {})):
        return False
    quota = quota or tenant_quota(space.tenant)
    if quota.max_credits is None:
        return True
    if others is None:
        others = tenant_credits(space.tenant, space)
    needed = usage.needed()
    return needed["router"] + needed["broker"] + others <= quota.max_credits + 1e-9


def try_place(space, address_type, wire_address, plan_status, topic, exclude=None,
               quota: TenantQuota | None = None):
    """(scheduled, pending_reason, placement) for an address given the others in its space."""
    usage = space_usage(space, exclude=exclude)
    topic_placement = None
    if address_type == "subscription":
        topic_row = Address.objects.filter(space=space, address=topic).first()
        if topic_row is None or not topic_row.scheduled:
            return False, f"Topic {topic} is not scheduled yet", []
        topic_placement = topic_row.placement
    placement = scheduling.place(
        space.type, address_type, wire_address, plan_status, usage, topic_placement
    )
    usage.add(address_type, plan_status, placement)
    if not fits_space(space, usage, quota):
        return False, scheduling.QUOTA_EXCEEDED, []
    return True, "", placement


def schedule_pending_addresses(stream, space: AddressSpace, ctx: Context) -> None:
    """Schedules Pending addresses that fit now, oldest first (topics before subscriptions)."""
    pending = Address.objects.filter(space=space, scheduled=False).order_by("created_at", "id")
    ordered = sorted(pending, key=lambda a: a.type == "subscription")
    for addr in ordered:
        ok, _, placement = try_place(space, addr.type, addr.address, addr.plan_status,
                                      addr.topic, exclude=addr.name)
        if ok:
            append_event(stream, "address.scheduled", {"name": addr.name, "placement": placement}, ctx)
