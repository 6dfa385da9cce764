"""Service functions of addresses: create (one or a list), change plan and spec, delete, purge
their stored messages."""
import contextlib
import copy

from django.db import transaction
from django.db.models import Count, Q

from core.context import Context
from core.errors import Conflict, Invalid, NotFound, QuotaExceeded, ServiceError
from eventlog import log
from tenants.models import AddressPlan, Tenant

from .. import address_forwarders, routers, scheduling, space_connectors, statements, validation
from ..models import Address, AddressSpace
from .common import (
    append_event,
    check_version,
    locked_space,
    refuse_if_terminating,
    space_quota,
)
from .placement import (
    address_plan_status,
    fits_space,
    schedule_pending_addresses,
    space_usage,
    tenant_credits,
    try_place,
)


def _address_plan(name, address_type, space: AddressSpace) -> AddressPlan:
    # one query: the plan, and whether the space's plan offers it
    plan = statements.address_plan(name, space.plan) if isinstance(name, str) else None
    if plan is None:
        raise Invalid(f"unknown address plan {name!r}", "spec.plan")
    if plan.address_type != address_type:
        raise Invalid(f"plan {name} is for {plan.address_type} addresses, not {address_type}",
                      "spec.plan")
    if not plan.offered:
        raise Invalid(f"plan {name} is not offered by address space plan {space.plan}",
                      "spec.plan")
    return plan


def _references(space: AddressSpace, address_type: str, topic, deadletter, expiry,
                batch: dict | None = None) -> dict:
    """The topic, deadletter and expiry an address names, checked to exist in its space (or
    among `batch`: {wire address: (type, ...)} of the items created before it in a list)."""
    batch = batch or {}

    def exists(value, kind):
        if value in batch:
            return batch[value][0] == kind
        return Address.objects.filter(space=space, address=value, type=kind).exists()

    refs = {"topic": "", "deadletter": "", "expiry": ""}
    if address_type == "subscription":
        if not topic:
            raise Invalid("a subscription needs spec.topic", "spec.topic")
        if not exists(topic, "topic"):
            raise Invalid(f"spec.topic {topic!r} is not a topic address in {space.name}",
                          "spec.topic")
        refs["topic"] = topic
    elif topic:
        raise Invalid("only subscriptions have a topic", "spec.topic")
    for field, value in (("deadletter", deadletter), ("expiry", expiry)):
        if not value:
            continue
        if address_type not in ("queue", "topic"):
            raise Invalid(f"only queues and topics have spec.{field}", f"spec.{field}")
        if not exists(value, "deadletter"):
            raise Invalid(f"spec.{field} {value!r} is not a deadletter address in {space.name}",
                          f"spec.{field}")
        refs[field] = value
    return refs


def _addresses_reach(tenant: Tenant, limit: int) -> bool:
    """Whether the tenant has `limit` addresses or more.

    Counting them all costs milliseconds once a tenant has thousands, so first a bound from
    one row per space: each address of a space came with one event of the space's stream, and
    the first event created the space, so a space has at most `last_sequence - 1` addresses.
    Only a tenant whose bound reaches the limit is counted exactly.
    """
    if statements.addresses_bound(tenant.pk) < limit:
        return False
    return statements.addresses_count(tenant.pk) >= limit


def _address_spec(address_type: str, spec: dict, space: AddressSpace,
                  kept: dict | None = None) -> dict:
    """The address's own spec fields, validated; `kept`: its spec stored before a change."""
    kept = kept or {}
    out = {}
    forwarders = _forwarders(address_type, spec.get("forwarders"), space)
    if forwarders:
        out["forwarders"] = forwarders
    ttl = validation.message_ttl(spec.get("messageTtl"), kept.get("messageTtl"))
    if ttl:
        out["messageTtl"] = ttl
    redelivery = validation.message_redelivery(spec.get("messageRedelivery"),
                                               kept.get("messageRedelivery"))
    if redelivery:
        out["messageRedelivery"] = redelivery
    if address_type == "subscription":
        subscription = spec.get("subscription") or {}
        if not isinstance(subscription, dict):
            raise Invalid("must be an object", "spec.subscription")
        out["subscription"] = {"maxConsumers": validation.max_consumers(
            subscription.get("maxConsumers"))}
    return out


def _forwarders(address_type: str, value, space: AddressSpace) -> list[dict]:
    """[] when no forwarder is asked; else Invalid naming the field: a forwarder the space
    cannot have (a standard space's on qdrouterd only), one address_forwarders.py refuses, and
    until they are realised, any valid one too."""
    if value in (None, []):
        return []
    if space.type != "standard":
        raise Invalid("spec.forwarders are for standard address spaces: they reach the remote "
                      "through the space's connectors (a brokered space has none)",
                      "spec.forwarders")
    refusal = routers.connectors_refusal()
    if refusal:
        raise Invalid(f"spec.forwarders need the space's connectors: {refusal}",
                      "spec.forwarders")
    names = [c["name"] for c in space_connectors.of(space.spec)]
    address_forwarders.validate(value, address_type=address_type, connectors=names)
    # Validated whole, then refused: nothing moves a forwarder's messages yet, and an address
    # that stored one would promise what no message does (docs/api.md, "Forwarders").
    raise Invalid(NOT_REALISED, "spec.forwarders")


NOT_REALISED = ("spec.forwarders are not available yet: nothing in this installation moves a "
                "forwarder's messages (these forwarders are valid; docs/api.md, \"Forwarders\")")


@transaction.atomic
def create_address(*, ctx: Context, space: AddressSpace, name=None, address=None, type=None,
                   plan=None, topic=None, deadletter=None, expiry=None, spec=None):
    with _create_reads(space, name, address, plan):
        return _create_address(ctx=ctx, space=space, name=name, address=address, type=type,
                               plan=plan, topic=topic, deadletter=deadletter, expiry=expiry,
                               spec=spec)


def _create_reads(space: AddressSpace, name, address, plan):
    """The lock and the reads of a create sent together (`statements.read_ahead`), where its
    address and name are valid; otherwise nothing ahead, so its errors come in their order."""
    try:
        wire = validation.address(address)
        name = validation.resource_name(name, space.name, "Address", wire)
    except Invalid:
        return contextlib.nullcontext()
    return statements.read_ahead(space.uid, tenant_id=space.tenant_id, space_id=space.pk,
                                 space_plan=space.plan, plan=plan, address=wire, name=name)


def _create_address(*, ctx, space, name, address, type, plan, topic, deadletter, expiry, spec):
    stream, space = locked_space(space)
    refuse_if_terminating(space)
    wire = validation.address(address)
    name = validation.resource_name(name, space.name, "Address", wire)
    address_type = validation.address_type(type, space.type)
    validation.stored_address(wire, address_type, space.type)
    if address_type == "subscription":
        validation.subscription_queue(wire, topic)
    plan_obj = _address_plan(plan, address_type, space)
    refs = _references(space, address_type, topic, deadletter, expiry)
    extra = _address_spec(address_type, spec or {}, space)
    taken = statements.clashes(space.pk, wire, name)
    clash = next((n for n, a in taken if a == wire), None)
    if clash is not None:
        raise Conflict(f"Address {wire!r} already exists with resource name {clash!r}",
                       "spec.address")
    if taken:
        raise Conflict(f"Address {name!r} already exists", "metadata.name")
    quota = space_quota(space)
    if quota.max_addresses is not None and _addresses_reach(space.tenant, quota.max_addresses):
        raise QuotaExceeded(f"Tenant quota of {quota.max_addresses} addresses reached.",
                            "spec.address")
    plan_status = address_plan_status(plan_obj)
    scheduled, reason, placement = try_place(space, address_type, wire, plan_status,
                                              refs["topic"], quota=quota)
    event = append_event(stream, "address.created", {
        "name": name, "address": wire, "type": address_type, "plan": plan_obj.name,
        "plan_status": plan_status, **refs, "spec": extra, "scheduled": scheduled,
        "pending_reason": reason, "placement": placement,
    }, ctx, space=space)
    if scheduled and address_type == "topic":
        schedule_pending_addresses(stream, space, ctx)  # subscriptions waiting for this topic
    return event.projected


@transaction.atomic
def create_addresses(*, ctx: Context, space: AddressSpace, items: list[dict]) -> list[Address]:
    """Every item (create_address's keyword arguments) in one transaction, or none; an item's
    refusal names it (`items[<i>].<field>`). The checks are create_address's, item after item,
    each seeing the items before it (a subscription may follow its topic), but with one lock,
    one read of the plans, quota and usage for the batch, and the events appended together.
    Pending addresses that a scheduled topic unblocks are retried once, after the batch."""
    stream, space = locked_space(space)
    refuse_if_terminating(space)
    quota = space_quota(space)
    plans: dict = {}
    batch: dict = {}  # wire address -> (type, scheduled, placement) of the items before
    names: set = set()
    events: list = []
    usage = space_usage(space)
    others = tenant_credits(space.tenant, space) if quota.max_credits is not None else 0.0
    count = (Address.objects.filter(space__tenant=space.tenant).count()
             if quota.max_addresses is not None else 0)
    schedule_pending = False
    for i, item in enumerate(items):
        try:
            wire = validation.address(item.get("address"))
            name = validation.resource_name(item.get("name"), space.name, "Address", wire)
            address_type = validation.address_type(item.get("type"), space.type)
            validation.stored_address(wire, address_type, space.type)
            topic = item.get("topic")
            if address_type == "subscription":
                validation.subscription_queue(wire, topic)
            key = (item.get("plan"), address_type)
            if key not in plans:
                plans[key] = _address_plan(item.get("plan"), address_type, space)
            plan_obj = plans[key]
            refs = _references(space, address_type, topic, item.get("deadletter"),
                               item.get("expiry"), batch)
            extra = _address_spec(address_type, item.get("spec") or {}, space)
            if wire in batch:
                raise Conflict(f"Address {wire!r} is in the list twice", "spec.address")
            if name in names:
                raise Conflict(f"Address {name!r} is in the list twice", "metadata.name")
            if quota.max_addresses is not None and count + i >= quota.max_addresses:
                raise QuotaExceeded(f"Tenant quota of {quota.max_addresses} addresses reached.",
                                    "spec.address")
            plan_status = address_plan_status(plan_obj)
            scheduled, reason, placement = True, "", []
            topic_placement = None
            if address_type == "subscription":
                known = batch.get(topic)
                if known is None:
                    row = Address.objects.filter(space=space, address=topic).first()
                    known = (row.type, row.scheduled, row.placement) if row else None
                if known is None or not known[1]:
                    scheduled, reason = False, f"Topic {topic} is not scheduled yet"
                else:
                    topic_placement = known[2]
            if scheduled:
                placement = scheduling.place(space.type, address_type, wire, plan_status, usage,
                                             topic_placement)
                trial = copy.deepcopy(usage)
                trial.add(address_type, plan_status, placement)
                if fits_space(space, trial, quota, others):
                    usage = trial
                else:
                    scheduled, reason, placement = False, scheduling.QUOTA_EXCEEDED, []
        except ServiceError as error:
            raise error.of_item(i) from None
        batch[wire] = (address_type, scheduled, placement)
        names.add(name)
        schedule_pending |= scheduled and address_type == "topic"
        events.append(("address.created", {
            "name": name, "address": wire, "type": address_type, "plan": plan_obj.name,
            "plan_status": plan_status, **refs, "spec": extra, "scheduled": scheduled,
            "pending_reason": reason, "placement": placement,
        }))
    wanted = [payload["name"] for _, payload in events]
    taken = list(Address.objects.filter(Q(address__in=list(batch)) | Q(name__in=wanted),
                                        space=space).values_list("name", "address"))
    if taken:
        at = {payload["address"]: i for i, (_, payload) in enumerate(events)}
        at.update({payload["name"]: i for i, (_, payload) in enumerate(events)})
        existing, wire = taken[0]
        if wire in at:
            raise Conflict(f"items[{at[wire]}]: Address {wire!r} already exists with resource "
                           f"name {existing!r}", f"items[{at[wire]}].spec.address")
        raise Conflict(f"items[{at[existing]}]: Address {existing!r} already exists",
                       f"items[{at[existing]}].metadata.name")
    log.append_many(stream, events, actor=ctx.actor, request_id=ctx.request_id)
    if schedule_pending:
        schedule_pending_addresses(stream, space, ctx)  # subscriptions waiting for these topics
    by_name = {a.name: a for a in Address.objects.filter(space=space, name__in=wanted)}
    return [by_name[name] for name in wanted]


@transaction.atomic
def update_address(*, ctx: Context, space: AddressSpace, name, plan=None, deadletter=None,
                   expiry=None, spec=None, address=None, type=None, topic=None,
                   expected_version=None):
    """Changes plan, deadletter/expiry and TTL/redelivery; address, type and topic are fixed."""
    stream, space = locked_space(space)
    refuse_if_terminating(space)
    current = Address.objects.filter(space=space, name=name).first()
    if current is None:
        raise NotFound(f"No address {name!r} in {space.name}.")
    check_version(current.resource_version, expected_version)
    for field, given, fixed in (("spec.address", address, current.address),
                                ("spec.type", type, current.type),
                                ("spec.topic", topic, current.topic or None)):
        if given is not None and given != fixed:
            raise Invalid(f"{field} cannot be changed; delete and create the address instead",
                          field)
    spec = spec or {}
    extra = _address_spec(current.type, spec, space, current.spec)
    if current.type == "subscription" and extra["subscription"] != current.spec.get(
        "subscription"
    ) and "subscription" in spec:
        raise Invalid("maxConsumers cannot be changed after creation",
                      "spec.subscription.maxConsumers")
    if current.type == "subscription":
        extra["subscription"] = current.spec.get("subscription", {"maxConsumers": 1})
    plan_obj = _address_plan(plan or current.plan, current.type, space)
    refs = _references(space, current.type, current.topic, deadletter, expiry)
    plan_status = address_plan_status(plan_obj)
    plan_changed = plan_obj.name != current.plan or plan_status != current.plan_status
    scheduled, reason, placement = current.scheduled, current.pending_reason, current.placement
    if plan_changed or not current.scheduled:
        scheduled, reason, placement = try_place(
            space, current.type, current.address, plan_status, current.topic, exclude=name
        )
        if not scheduled and current.scheduled:
            # Never unschedule a working address (its queue and messages would go): refuse.
            raise QuotaExceeded(f"{reason}: plan {plan_obj.name} does not fit in {space.name}",
                                "spec.plan")
    payload = {
        "name": name, "plan": plan_obj.name, "plan_status": plan_status,
        "deadletter": refs["deadletter"], "expiry": refs["expiry"], "spec": extra,
        "scheduled": scheduled, "pending_reason": reason, "placement": placement,
    }
    unchanged = {k: getattr(current, k) for k in payload if k != "name"}
    if {k: v for k, v in payload.items() if k != "name"} == unchanged:
        return current
    append_event(stream, "address.plan_changed" if plan_changed else "address.spec_changed",
            payload, ctx)
    if plan_changed:
        schedule_pending_addresses(stream, space, ctx)
    return Address.objects.get(space=space, name=name)


@transaction.atomic
def delete_address(*, ctx: Context, space: AddressSpace, name, expected_version=None):
    stream, space = locked_space(space)
    current = Address.objects.filter(space=space, name=name).first()
    if current is None:
        raise NotFound(f"No address {name!r} in {space.name}.")
    check_version(current.resource_version, expected_version)
    users = Address.objects.filter(space=space).exclude(pk=current.pk)
    if current.type == "topic":
        users = users.filter(topic=current.address)
    elif current.type == "deadletter":
        users = users.filter(deadletter=current.address) | users.filter(expiry=current.address)
    else:
        users = users.none()
    dependent = list(users.values_list("name", flat=True)[:5])
    if dependent:
        raise Conflict(f"Address {name} is still used by {', '.join(dependent)}", "metadata.name")
    append_event(stream, "address.deleted", {"name": name}, ctx)
    schedule_pending_addresses(stream, space, ctx)


STORING_TYPES = ("queue", "subscription", "deadletter")


@transaction.atomic
def purge_address(*, ctx: Context, space: AddressSpace, name) -> Address:
    """Asks for every stored message of a queue, subscription or deadletter address to be
    dropped. The storage agent carries out each `address.purged` event once, after it is
    committed; the event is the audit entry (who, when, request id)."""
    stream, space = locked_space(space)
    refuse_if_terminating(space)
    current = Address.objects.filter(space=space, name=name).first()
    if current is None:
        raise NotFound(f"No address {name!r} in {space.name}.")
    if current.type not in STORING_TYPES:
        raise Invalid(f"a {current.type} address stores no messages; only "
                      f"{', '.join(STORING_TYPES)} addresses can be purged", "spec.type")
    append_event(stream, "address.purged", {"name": name}, ctx)
    return current


def address_counts(space_ids) -> dict:
    rows = Address.objects.filter(space_id__in=space_ids).values("space_id").annotate(n=Count("id"))
    return {r["space_id"]: r["n"] for r in rows}
