"""Operators' plans: each change is an event of the one plans stream (no tenant), written beside
the plan's row. A change of credits re-places the addresses of every space that uses the plan,
through events of those spaces' own streams, so their agents apply it."""
import copy
import logging

from django.db import transaction

from core.context import Context
from core.errors import Conflict, Invalid, NotFound
from eventlog import fanout, log
from tenants.models import AddressPlan, AddressSpacePlan

from .. import plan_specs, scheduling, validation
from ..models import Address, AddressSpace
from .common import (
    append_event,
    check_version,
    locked_space,
    space_quota,
)
from .placement import (
    address_plan_status,
    schedule_pending_addresses,
    space_plan_status,
    tenant_credits,
)

logger = logging.getLogger(__name__)


def _plan_event(type_name: str, payload: dict, ctx: Context) -> None:
    append_event(log.lock_plans_stream(), type_name, payload, ctx)


def _address_plans_named(names: list[str], space_type: str) -> list[AddressPlan]:
    plans = {p.name: p for p in AddressPlan.objects.filter(name__in=names)}
    allowed = validation.ADDRESS_TYPES_BY_SPACE[space_type]
    for i, name in enumerate(names):
        plan = plans.get(name)
        if plan is None:
            raise Invalid(f"unknown address plan {name!r}", f"spec.addressPlans[{i}]")
        if plan.address_type not in allowed:
            raise Invalid(f"plan {name} is for {plan.address_type} addresses, which a "
                          f"{space_type} address space has not", f"spec.addressPlans[{i}]")
    return [plans[n] for n in names]


def _locked_address_plan(name: str) -> AddressPlan:
    plan = AddressPlan.objects.select_for_update().filter(name=name).first()
    if plan is None:
        raise NotFound(f"No address plan {name!r}.")
    return plan


def _locked_space_plan(name: str) -> AddressSpacePlan:
    plan = AddressSpacePlan.objects.select_for_update().filter(name=name).first()
    if plan is None:
        raise NotFound(f"No address space plan {name!r}.")
    return plan


@transaction.atomic
def create_address_plan(*, ctx: Context, name, spec) -> AddressPlan:
    name = plan_specs.plan_name(name)
    fields = plan_specs.address_plan_fields(spec)
    log.lock_plans_stream()  # serialises plan writers: the name check below holds
    if AddressPlan.objects.filter(name=name).exists():
        raise Conflict(f"Address plan {name!r} already exists.", "metadata.name")
    plan = AddressPlan.objects.create(name=name, **fields)
    _plan_event("address_plan.created", {"name": name,
                                         "spec": plan_specs.address_plan_spec(plan)}, ctx)
    return plan


@transaction.atomic
def replace_address_plan(*, ctx: Context, name, spec, expected_version=None) -> AddressPlan:
    """Sets the whole spec of an address plan (PATCH merges into the current one first). New
    credits, partitions, TTL or redelivery re-place every address of the plan."""
    log.lock_plans_stream()
    plan = _locked_address_plan(name)
    fields = plan_specs.address_plan_fields(spec, kept=plan)
    check_version(plan.resource_version, expected_version)
    if fields["address_type"] != plan.address_type and (
            Address.objects.filter(plan=name).exists() or plan.space_plans.exists()):
        raise Invalid("spec.addressType cannot change while addresses use the plan or address "
                      "space plans offer it", "spec.addressType")
    previous, before = plan_specs.address_plan_spec(plan), address_plan_status(plan)
    for field, value in fields.items():
        setattr(plan, field, value)
    after = plan_specs.address_plan_spec(plan)
    if after == previous:
        return plan
    plan.resource_version += 1
    plan.save()
    _plan_event("address_plan.changed", {"name": name, "spec": after, "previous": previous},
                ctx)
    status = address_plan_status(plan)
    if status != before:
        # A terminating space is being torn down: nothing of it is placed again.
        spaces = (AddressSpace.objects.filter(addresses__plan=name, terminating=False)
                  .distinct().order_by("uid"))
        for space in spaces:
            reevaluate_space(space, ctx, {name: status})
    logger.info("plan.changed", extra={"plan": name, "kind": "AddressPlan",
                                       "replaced": status != before})
    return plan


@transaction.atomic
def delete_address_plan(*, ctx: Context, name, expected_version=None) -> None:
    log.lock_plans_stream()
    plan = _locked_address_plan(name)
    check_version(plan.resource_version, expected_version)
    users = list(Address.objects.filter(plan=name).select_related("space__tenant")
                 .order_by("space__tenant__slug", "space__name", "name")[:3])
    if users:
        named = ", ".join(f"{a.space.tenant.slug}/{a.name}" for a in users)
        raise Conflict(f"Address plan {name} is in use (by {named}); change their plans first.",
                       "metadata.name")
    offered = sorted(plan.space_plans.values_list("name", flat=True))
    if offered:
        raise Conflict(f"Address plan {name} is offered by {', '.join(offered)}; take it out "
                       "of their addressPlans first.", "metadata.name")
    previous = plan_specs.address_plan_spec(plan)
    plan.delete()
    _plan_event("address_plan.deleted", {"name": name, "previous": previous}, ctx)


@transaction.atomic
def create_space_plan(*, ctx: Context, name, spec) -> AddressSpacePlan:
    name = plan_specs.plan_name(name)
    fields = plan_specs.space_plan_fields(spec)
    names = fields.pop("address_plans")
    log.lock_plans_stream()
    offered = _address_plans_named(names, fields["address_space_type"])
    names = sorted(names)
    if AddressSpacePlan.objects.filter(name=name).exists():
        raise Conflict(f"Address space plan {name!r} already exists.", "metadata.name")
    plan = AddressSpacePlan.objects.create(name=name, **fields)
    plan.address_plans.set(offered)
    _plan_event("address_space_plan.created",
                {"name": name, "spec": plan_specs.space_plan_spec(plan, names)}, ctx)
    return plan


@transaction.atomic
def replace_space_plan(*, ctx: Context, name, spec, expected_version=None) -> AddressSpacePlan:
    """Sets the whole spec of an address space plan. New resource limits re-evaluate every
    space of the plan; a new router policy wakes their agents."""
    log.lock_plans_stream()
    plan = _locked_space_plan(name)
    fields = plan_specs.space_plan_fields(spec, kept=plan)
    names = fields.pop("address_plans")
    check_version(plan.resource_version, expected_version)
    spaces = AddressSpace.objects.filter(plan=name).order_by("uid")
    if fields["address_space_type"] != plan.address_space_type and spaces.exists():
        raise Invalid("spec.addressSpaceType cannot change while address spaces use the plan",
                      "spec.addressSpaceType")
    offered = _address_plans_named(names, fields["address_space_type"])
    names = sorted(names)
    before_names = sorted(plan.address_plans.values_list("name", flat=True))
    previous = plan_specs.space_plan_spec(plan, before_names)
    before_limits, before_policy = plan.resource_limits, plan.router_policy
    for field, value in fields.items():
        setattr(plan, field, value)
    after = plan_specs.space_plan_spec(plan, names)
    if after == previous:
        return plan
    plan.resource_version += 1
    plan.save()
    plan.address_plans.set(offered)
    _plan_event("address_space_plan.changed",
                {"name": name, "spec": after, "previous": previous}, ctx)
    uids = list(spaces.values_list("uid", flat=True))
    if plan.resource_limits != before_limits:
        for space in spaces.filter(terminating=False):
            stream, space = locked_space(space)
            append_event(stream, "address_space.plan_changed",
                    {"plan": name, "plan_status": space_plan_status(plan)}, ctx)
            space.refresh_from_db()
            reevaluate_space(space, ctx, {})
    elif plan.router_policy != before_policy:
        # The router agent reads the plan's policy at every reconcile: wake it.
        transaction.on_commit(lambda: [fanout.notify_space(uid) for uid in uids], robust=True)
    logger.info("plan.changed", extra={"plan": name, "kind": "AddressSpacePlan",
                                       "spaces": len(uids)})
    return plan


@transaction.atomic
def delete_space_plan(*, ctx: Context, name, expected_version=None) -> None:
    log.lock_plans_stream()
    plan = _locked_space_plan(name)
    check_version(plan.resource_version, expected_version)
    users = list(AddressSpace.objects.filter(plan=name).select_related("tenant")
                 .order_by("tenant__slug", "name")[:3])
    if users:
        named = ", ".join(f"{s.tenant.slug}/{s.name}" for s in users)
        raise Conflict(f"Address space plan {name} is in use (by {named}); change their plans "
                       "first.", "metadata.name")
    previous = plan_specs.space_plan_spec(
        plan, sorted(plan.address_plans.values_list("name", flat=True)))
    plan.delete()
    _plan_event("address_space_plan.deleted", {"name": name, "previous": previous}, ctx)


def reevaluate_space(space: AddressSpace, ctx: Context, new_status: dict[str, dict]) -> None:
    """Re-places a space's addresses after an operator changed plans (EnMasse's re-scheduling).

    `new_status`: address plan name -> its new plan status. Scheduled addresses keep their
    placement and are counted in the order they were created, then those of a changed plan are
    placed again with their new credits; one that no longer fits the space plan (or the
    tenant's credits) goes Pending with "Quota exceeded", and its subscriptions with it. Pending
    addresses that fit now are scheduled. Each change is an event of the space's stream, so its
    agents apply it.
    """
    stream, space = locked_space(space)
    quota = space_quota(space)
    others = tenant_credits(space.tenant, space) if quota.max_credits is not None else 0.0
    limits = space.plan_status.get("resourceLimits", {})

    def fits(usage: scheduling.Usage) -> bool:
        if not scheduling.fits(usage, limits):
            return False
        needed = usage.needed()
        return quota.max_credits is None or (
            needed["router"] + needed["broker"] + others <= quota.max_credits + 1e-9)

    addresses = list(Address.objects.filter(space=space).order_by("created_at", "id"))
    # name -> (plan_status, scheduled, pending_reason, placement) after re-evaluation
    after = {a.name: (new_status.get(a.plan, a.plan_status), a.scheduled, a.pending_reason,
                      a.placement) for a in addresses}
    usage = scheduling.Usage()
    scheduled = [a for a in addresses if a.scheduled]
    for a in [a for a in scheduled if a.plan not in new_status] + \
             [a for a in scheduled if a.plan in new_status]:
        status, placement = after[a.name][0], a.placement
        if a.plan in new_status and a.type != "subscription":
            placement = scheduling.place(space.type, a.type, a.address, status, usage)
        elif a.plan in new_status:
            topic = next((t for t in addresses if t.address == a.topic), None)
            placement = list(after[topic.name][3]) if topic else []
        trial = copy.deepcopy(usage)
        trial.add(a.type, status, placement)
        if fits(trial):
            usage, after[a.name] = trial, (status, True, "", placement)
        else:
            after[a.name] = (status, False, scheduling.QUOTA_EXCEEDED, [])
    for a in addresses:  # a subscription cannot outlive its topic's placement
        if a.type == "subscription" and after[a.name][1]:
            topic = next((t for t in addresses if t.address == a.topic), None)
            if topic is None or not after[topic.name][1]:
                after[a.name] = (after[a.name][0], False,
                                 f"Topic {a.topic} is not scheduled yet", [])
    for a in addresses:
        status, ok, reason, placement = after[a.name]
        if (status, ok, reason, placement) == (a.plan_status, a.scheduled, a.pending_reason,
                                               a.placement):
            continue
        append_event(stream, "address.plan_changed", {
            "name": a.name, "plan": a.plan, "plan_status": status, "deadletter": a.deadletter,
            "expiry": a.expiry, "spec": a.spec, "scheduled": ok, "pending_reason": reason,
            "placement": placement,
        }, ctx)
        if a.scheduled and not ok:
            logger.info("address.unscheduled", extra={"space": str(space.uid),
                                                      "address": a.name, "reason": reason})
    schedule_pending_addresses(stream, space, ctx)
