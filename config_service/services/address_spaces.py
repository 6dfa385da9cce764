"""Service functions of address spaces: create, change the plan, delete (Terminating) and
remove once the agents tore it down; and a tenant's spaces as tenants.services needs them."""
import uuid

from django.conf import settings
from django.db import transaction

from core.context import SYSTEM, Context
from core.errors import Conflict, Invalid, NotFound, QuotaExceeded
from eventlog import fanout, log
from eventlog.models import EventStream
from tenants.models import AddressSpacePlan, Tenant

from .. import brokers, routers, scheduling, space_connectors, space_endpoints, validation
from ..models import AddressSpace
from .common import (
    append_event,
    check_version,
    locked_space,
    refuse_if_terminating,
    tenant_quota,
)
from .placement import schedule_pending_addresses, space_plan_status, space_usage


def _space_plan(name, space_type) -> AddressSpacePlan:
    plan = AddressSpacePlan.objects.filter(name=name).first() if isinstance(name, str) else None
    if plan is None:
        raise Invalid(f"unknown address space plan {name!r}", "spec.plan")
    if plan.address_space_type != space_type:
        raise Invalid(
            f"plan {name} is for {plan.address_space_type} address spaces, not {space_type}",
            "spec.plan",
        )
    return plan


@transaction.atomic
def create_address_space(*, ctx: Context, tenant: Tenant, name, type, plan, spec=None):
    name = validation.space_name(name)
    if not isinstance(type, str) or type not in validation.ADDRESS_TYPES_BY_SPACE:
        raise Invalid("spec.type must be standard or brokered", "spec.type")
    if type == "standard" and not settings.MAAS_ROUTER_ENABLED:
        raise Invalid("standard address spaces need a router, and this installation runs none "
                      "(MAAS_ROUTER_ENABLED=false): create a brokered one", "spec.type")
    validation.space_spec(spec or {})
    spec = _with_endpoints(dict(spec or {}), name, tenant)
    spec = _with_connectors(spec, type)
    plan_obj = _space_plan(plan, type)
    # Serialises quota checks, and waits for (then refuses) a deletion of the tenant.
    locked = Tenant.objects.select_for_update().filter(pk=tenant.pk).first()
    if locked is None or locked.deleted_at is not None:
        raise NotFound(f"Tenant {tenant.slug} is being deleted.")
    if AddressSpace.objects.filter(tenant=tenant, name=name).exists():
        raise Conflict(f"Address space {name!r} already exists (or is still terminating).",
                       "metadata.name")
    quota = tenant_quota(tenant)
    if quota.max_address_spaces is not None and (
        AddressSpace.objects.filter(tenant=tenant).count() >= quota.max_address_spaces
    ):
        raise QuotaExceeded(
            f"Tenant quota of {quota.max_address_spaces} address spaces reached.", "metadata.name"
        )
    uid = uuid.uuid4()
    stream = log.open_stream(uid, EventStream.ADDRESS_SPACE, tenant)
    payload = {"uid": str(uid), "name": name, "type": type, "plan": plan_obj.name,
               "plan_status": space_plan_status(plan_obj), "spec": dict(spec or {})}
    broker = brokers.choose_broker()
    if broker:  # left out for the shared broker, as in the events before placement
        payload["broker"] = broker
    append_event(stream, "address_space.created", payload, ctx)
    return AddressSpace.objects.get(uid=uid)


@transaction.atomic
def change_address_space_plan(*, ctx: Context, space: AddressSpace, plan, expected_version=None,
                              spec=None):
    """Changes the plan of a space; with `spec` (the keys besides type and plan, after a PUT or
    a PATCH) the space's spec is replaced too, so keys left out are gone."""
    stream, space = locked_space(space)
    check_version(space.resource_version, expected_version)
    refuse_if_terminating(space)
    new_spec = space.spec if spec is None else dict(spec)
    # A key stored before MaaS refused EnMasse's others may stay as it is; none may be added.
    validation.space_spec({k: v for k, v in new_spec.items()
                           if k not in space.spec or space.spec[k] != v})
    if new_spec.get("endpoints") != space.spec.get("endpoints"):
        new_spec = _with_endpoints(new_spec, space.name, space.tenant, space)
    if new_spec.get("connectors") != space.spec.get("connectors"):
        new_spec = _with_connectors(new_spec, space.type, space)
    plan_obj = _space_plan(plan, space.type)
    plan_changed = plan_obj.name != space.plan
    if not plan_changed and new_spec == space.spec:
        return space
    if plan_changed:
        usage = space_usage(space)
        if not scheduling.fits(usage, plan_obj.resource_limits):
            raise QuotaExceeded(
                f"The addresses of {space.name} use {usage.needed()} and do not fit plan "
                f"{plan_obj.name}.", "spec.plan",
            )
    payload = {"plan": plan_obj.name, "plan_status": space_plan_status(plan_obj)}
    if new_spec != space.spec:
        append_event(stream, "address_space.spec_changed", {**payload, "spec": new_spec}, ctx)
    else:
        append_event(stream, "address_space.plan_changed", payload, ctx)
    space.refresh_from_db()
    if plan_changed:
        schedule_pending_addresses(stream, space, ctx)
    return space


def _with_endpoints(spec: dict, name: str, tenant: Tenant, space=None) -> dict:
    """`spec` with its endpoints normalised (space_endpoints.py), each host no other space's."""
    if "endpoints" not in spec:
        return spec
    previous = space.spec.get("endpoints") if space is not None else None
    endpoints = space_endpoints.validate(spec["endpoints"], space=name, tenant=tenant.slug,
                                         previous=previous)
    others = AddressSpace.objects.exclude(uid=space.uid) if space is not None \
        else AddressSpace.objects.all()
    for i, host in enumerate(space_endpoints.hosts(endpoints)):
        # A host picks its certificate on the shared listeners (SNI): one space's only. Another
        # tenant's space is not named.
        if others.filter(spec__endpoints__contains=[{"expose": {"routeHost": host}}]).exists():
            raise Invalid(f"spec.endpoints[{i}].expose.routeHost {host!r} is taken by another "
                          "address space", f"spec.endpoints[{i}].expose.routeHost")
    return {**spec, "endpoints": endpoints}


def _with_connectors(spec: dict, space_type: str, space=None) -> dict:
    """`spec` with its connectors normalised (space_connectors.py), where the routers carry
    them: a standard space's, on qdrouterd."""
    if "connectors" not in spec:
        return spec
    if spec["connectors"]:  # none asked (an empty list) is never refused
        if space_type != "standard":
            raise Invalid("spec.connectors are for standard address spaces: their router "
                          "connects to the remote endpoints (a brokered space has none)",
                          "spec.connectors")
        refusal = routers.connectors_refusal()
        if refusal:
            raise Invalid(refusal, "spec.connectors")
    previous = space.spec.get("connectors") if space is not None else None
    return {**spec, "connectors": space_connectors.validate(spec["connectors"],
                                                            previous=previous)}


@transaction.atomic
def delete_address_space(*, ctx: Context, space: AddressSpace, expected_version=None):
    stream, space = locked_space(space)
    check_version(space.resource_version, expected_version)
    if not space.terminating:
        append_event(stream, "address_space.deleted", {}, ctx)


@transaction.atomic
def remove_address_space(*, uid, ctx: Context = SYSTEM) -> bool:
    """Drops a terminating space once its agents tore everything down (the finalizer)."""
    # Two agents (a worker's and another's) may both see the last teardown done: the second to
    # get the stream's lock finds the space gone, which is what it wanted, not an error.
    stream = EventStream.objects.select_for_update().filter(uid=uid).first()
    space = AddressSpace.objects.filter(uid=uid, terminating=True).first()
    if stream is None or space is None:
        return False
    append_event(stream, "address_space.removed", {}, ctx)
    return True


# What tenants.services (the layer below) needs of a tenant's address spaces, registered with it
# at start-up (config_service/apps.py): tenants never imports the address spaces.

class TenantSpaces:
    """tenants.services.TenantSpaces: a tenant's address spaces."""

    def exist(self, tenant: Tenant) -> bool:
        return AddressSpace.objects.filter(tenant=tenant).exists()

    def names(self, tenant: Tenant) -> list[str]:
        return list(AddressSpace.objects.filter(tenant=tenant).order_by("name")
                    .values_list("name", flat=True))

    def delete_all(self, *, ctx: Context, tenant: Tenant) -> None:
        """Deletes every address space of a tenant being deleted; one already Terminating is
        left to its finalizer."""
        for space in AddressSpace.objects.filter(tenant=tenant, terminating=False).order_by("name"):
            delete_address_space(ctx=ctx, space=space)

    def wake_all(self, tenant: Tenant) -> None:
        """After commit, wakes the agents of every space of the tenant: a throttle lives in the
        routers but changes no space's sequence."""
        uids = list(AddressSpace.objects.filter(tenant=tenant).values_list("uid", flat=True))
        transaction.on_commit(lambda: [fanout.notify_space(uid) for uid in uids], robust=True)
