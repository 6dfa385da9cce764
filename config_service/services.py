"""Service functions: the only way address spaces, addresses and messaging users change.

Each one validates, checks plans, credits and the tenant quota, then appends its ConfigEvent(s)
in one transaction (see `log.append`), which also updates the projections and the outbox.
"""
import contextlib
import copy
import logging
import uuid
from collections import defaultdict

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q

from maas.core.context import SYSTEM, Context
from maas.core.errors import Conflict, Invalid, NotFound, QuotaExceeded, ServiceError
from tenants.models import AddressPlan, AddressSpacePlan, Tenant, TenantQuota

from . import brokers, fanout, log, plan_specs, scheduling, statements, validation
from .models import Address, AddressSpace, EventStream, MessagingUser
from .passwords import hash_password

logger = logging.getLogger(__name__)


def _append(stream, type_name, payload, ctx: Context, space=None):
    return log.append(stream, type_name, payload, actor=ctx.actor, request_id=ctx.request_id,
                      space=space)


def _check_version(current: int, expected: int | None) -> None:
    if expected is not None and int(expected) != current:
        raise Conflict(
            f"resourceVersion {expected} is stale; the current one is {current}. Read the object "
            "again and retry.",
            "metadata.resourceVersion",
        )


def _locked_space(space: AddressSpace) -> tuple[EventStream, AddressSpace]:
    """The space's stream, locked, and the space read again under that lock, with its tenant
    and the tenant's quota (`_space_quota`)."""
    stream = statements.lock_stream(space.uid)
    space = statements.space_with_quota(space.uid) if stream is not None else None
    if space is None:
        raise NotFound("No such address space.")
    return stream, space


def _quota(tenant: Tenant) -> TenantQuota:
    quota, _ = TenantQuota.objects.get_or_create(tenant=tenant)
    return quota


def _space_quota(space: AddressSpace) -> TenantQuota:
    """The quota of a space `_locked_space` returned: read with it, so no query unless the
    tenant has no quota row yet."""
    try:
        return space.tenant.quota
    except TenantQuota.DoesNotExist:
        return _quota(space.tenant)


# Address spaces -------------------------------------------------------------------------------

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


def space_plan_status(plan: AddressSpacePlan) -> dict:
    return {"name": plan.name, "resourceLimits": plan.resource_limits}


@transaction.atomic
def create_address_space(*, ctx: Context, tenant: Tenant, name, type, plan, spec=None):
    name = validation.space_name(name)
    if not isinstance(type, str) or type not in validation.ADDRESS_TYPES_BY_SPACE:
        raise Invalid("spec.type must be standard or brokered", "spec.type")
    if type == "standard" and not settings.MAAS_ROUTER_ENABLED:
        raise Invalid("standard address spaces need a router, and this installation runs none "
                      "(MAAS_ROUTER_ENABLED=false): create a brokered one", "spec.type")
    validation.space_spec(spec or {})
    plan_obj = _space_plan(plan, type)
    # Serialises quota checks, and waits for (then refuses) a deletion of the tenant.
    locked = Tenant.objects.select_for_update().filter(pk=tenant.pk).first()
    if locked is None or locked.deleted_at is not None:
        raise NotFound(f"Tenant {tenant.slug} is being deleted.")
    if AddressSpace.objects.filter(tenant=tenant, name=name).exists():
        raise Conflict(f"Address space {name!r} already exists (or is still terminating).",
                       "metadata.name")
    quota = _quota(tenant)
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
    _append(stream, "address_space.created", payload, ctx)
    return AddressSpace.objects.get(uid=uid)


@transaction.atomic
def change_address_space_plan(*, ctx: Context, space: AddressSpace, plan, expected_version=None,
                              spec=None):
    """Changes the plan of a space; with `spec` (the keys besides type and plan, after a PUT or
    a PATCH) the space's spec is replaced too, so keys left out are gone."""
    stream, space = _locked_space(space)
    _check_version(space.resource_version, expected_version)
    _refuse_if_terminating(space)
    new_spec = space.spec if spec is None else dict(spec)
    # A key stored before MaaS refused EnMasse's others may stay as it is; none may be added.
    validation.space_spec({k: v for k, v in new_spec.items()
                           if k not in space.spec or space.spec[k] != v})
    plan_obj = _space_plan(plan, space.type)
    plan_changed = plan_obj.name != space.plan
    if not plan_changed and new_spec == space.spec:
        return space
    if plan_changed:
        usage = _usage(space)
        if not scheduling.fits(usage, plan_obj.resource_limits):
            raise QuotaExceeded(
                f"The addresses of {space.name} use {usage.needed()} and do not fit plan "
                f"{plan_obj.name}.", "spec.plan",
            )
    payload = {"plan": plan_obj.name, "plan_status": space_plan_status(plan_obj)}
    if new_spec != space.spec:
        _append(stream, "address_space.spec_changed", {**payload, "spec": new_spec}, ctx)
    else:
        _append(stream, "address_space.plan_changed", payload, ctx)
    space.refresh_from_db()
    if plan_changed:
        _schedule_pending(stream, space, ctx)
    return space


@transaction.atomic
def delete_address_space(*, ctx: Context, space: AddressSpace, expected_version=None):
    stream, space = _locked_space(space)
    _check_version(space.resource_version, expected_version)
    if not space.terminating:
        _append(stream, "address_space.deleted", {}, ctx)


@transaction.atomic
def remove_address_space(*, uid, ctx: Context = SYSTEM) -> bool:
    """Drops a terminating space once its agents tore everything down (the finalizer)."""
    # Two agents (a worker's and another's) may both see the last teardown done: the second to
    # get the stream's lock finds the space gone, which is what it wanted, not an error.
    stream = EventStream.objects.select_for_update().filter(uid=uid).first()
    space = AddressSpace.objects.filter(uid=uid, terminating=True).first()
    if stream is None or space is None:
        return False
    _append(stream, "address_space.removed", {}, ctx)
    return True


def _refuse_if_terminating(space: AddressSpace) -> None:
    if space.terminating:
        raise Conflict(f"Address space {space.name} is being deleted.", "metadata.name")


# Addresses ------------------------------------------------------------------------------------

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


def address_plan_status(plan: AddressPlan) -> dict:
    return {
        "name": plan.name,
        "partitions": plan.partitions,
        "resources": plan.resources,
        "messageTtl": plan.message_ttl,
        "messageRedelivery": plan.message_redelivery,
    }


_USAGE_GROUP = ("type", "plan_status__resources", "placement")


def _usage_groups(addresses, *by: str):
    """(*by, type, resources, placement, count) of scheduled addresses: the database groups
    them (a space's addresses share a few plans) instead of sending every row."""
    return (
        addresses.filter(scheduled=True)
        .values_list(*by, *_USAGE_GROUP)
        .annotate(n=Count("id"))
        .order_by()
    )


def _usage(space: AddressSpace, exclude: str | None = None) -> scheduling.Usage:
    return scheduling.usage_of_groups(statements.usage_groups(space.pk, exclude or ""))


def _tenant_credits(tenant: Tenant, exclude_space: AddressSpace) -> float:
    """Credits needed by the tenant's other spaces, each counted on its own (one query)."""
    groups = defaultdict(list)
    others = Address.objects.filter(space__tenant=tenant).exclude(space_id=exclude_space.pk)
    for space_id, *group in _usage_groups(others, "space_id"):
        groups[space_id].append(group)
    total = 0.0
    for space_groups in groups.values():
        needed = scheduling.usage_of_groups(space_groups).needed()
        total += needed["router"] + needed["broker"]
    return total


def _fits(space: AddressSpace, usage: scheduling.Usage, quota: TenantQuota | None = None,
          others: float | None = None) -> bool:
    """Whether `usage` fits the space's plan and the tenant's credits; `others`: the credits
    of the tenant's other spaces, if already read (a batch reads them once)."""
    if not scheduling.fits(usage, space.plan_status.get("resourceLimits", {})):
        return False
    quota = quota or _quota(space.tenant)
    if quota.max_credits is None:
        return True
    if others is None:
        others = _tenant_credits(space.tenant, space)
    needed = usage.needed()
    return needed["router"] + needed["broker"] + others <= quota.max_credits + 1e-9


def _try_place(space, address_type, wire_address, plan_status, topic, exclude=None,
               quota: TenantQuota | None = None):
    """(scheduled, pending_reason, placement) for an address given the others in its space."""
    usage = _usage(space, exclude=exclude)
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
    if not _fits(space, usage, quota):
        return False, scheduling.QUOTA_EXCEEDED, []
    return True, "", placement


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


def _address_spec(address_type: str, spec: dict) -> dict:
    out = {}
    ttl = validation.message_ttl(spec.get("messageTtl"))
    if ttl:
        out["messageTtl"] = ttl
    redelivery = validation.message_redelivery(spec.get("messageRedelivery"))
    if redelivery:
        out["messageRedelivery"] = redelivery
    if address_type == "subscription":
        subscription = spec.get("subscription") or {}
        if not isinstance(subscription, dict):
            raise Invalid("must be an object", "spec.subscription")
        out["subscription"] = {"maxConsumers": validation.max_consumers(
            subscription.get("maxConsumers"))}
    return out


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
    stream, space = _locked_space(space)
    _refuse_if_terminating(space)
    wire = validation.address(address)
    name = validation.resource_name(name, space.name, "Address", wire)
    address_type = validation.address_type(type, space.type)
    if address_type == "subscription":
        validation.subscription_queue(wire, topic)
    if address_type == "topic":
        validation.topic_exchanges(wire)
    plan_obj = _address_plan(plan, address_type, space)
    refs = _references(space, address_type, topic, deadletter, expiry)
    extra = _address_spec(address_type, spec or {})
    taken = statements.clashes(space.pk, wire, name)
    clash = next((n for n, a in taken if a == wire), None)
    if clash is not None:
        raise Conflict(f"Address {wire!r} already exists with resource name {clash!r}",
                       "spec.address")
    if taken:
        raise Conflict(f"Address {name!r} already exists", "metadata.name")
    quota = _space_quota(space)
    if quota.max_addresses is not None and _addresses_reach(space.tenant, quota.max_addresses):
        raise QuotaExceeded(f"Tenant quota of {quota.max_addresses} addresses reached.",
                            "spec.address")
    plan_status = address_plan_status(plan_obj)
    scheduled, reason, placement = _try_place(space, address_type, wire, plan_status,
                                              refs["topic"], quota=quota)
    event = _append(stream, "address.created", {
        "name": name, "address": wire, "type": address_type, "plan": plan_obj.name,
        "plan_status": plan_status, **refs, "spec": extra, "scheduled": scheduled,
        "pending_reason": reason, "placement": placement,
    }, ctx, space=space)
    if scheduled and address_type == "topic":
        _schedule_pending(stream, space, ctx)  # subscriptions waiting for this topic
    return event.projected


@transaction.atomic
def create_addresses(*, ctx: Context, space: AddressSpace, items: list[dict]) -> list[Address]:
    """Every item (create_address's keyword arguments) in one transaction, or none; an item's
    refusal names it (`items[<i>].<field>`). The checks are create_address's, item after item,
    each seeing the items before it (a subscription may follow its topic), but with one lock,
    one read of the plans, quota and usage for the batch, and the events appended together.
    Pending addresses that a scheduled topic unblocks are retried once, after the batch."""
    stream, space = _locked_space(space)
    _refuse_if_terminating(space)
    quota = _space_quota(space)
    plans: dict = {}
    batch: dict = {}  # wire address -> (type, scheduled, placement) of the items before
    names: set = set()
    events: list = []
    usage = _usage(space)
    others = _tenant_credits(space.tenant, space) if quota.max_credits is not None else 0.0
    count = (Address.objects.filter(space__tenant=space.tenant).count()
             if quota.max_addresses is not None else 0)
    schedule_pending = False
    for i, item in enumerate(items):
        try:
            wire = validation.address(item.get("address"))
            name = validation.resource_name(item.get("name"), space.name, "Address", wire)
            address_type = validation.address_type(item.get("type"), space.type)
            topic = item.get("topic")
            if address_type == "subscription":
                validation.subscription_queue(wire, topic)
            if address_type == "topic":
                validation.topic_exchanges(wire)
            key = (item.get("plan"), address_type)
            if key not in plans:
                plans[key] = _address_plan(item.get("plan"), address_type, space)
            plan_obj = plans[key]
            refs = _references(space, address_type, topic, item.get("deadletter"),
                               item.get("expiry"), batch)
            extra = _address_spec(address_type, item.get("spec") or {})
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
                if _fits(space, trial, quota, others):
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
        _schedule_pending(stream, space, ctx)  # subscriptions waiting for these topics
    by_name = {a.name: a for a in Address.objects.filter(space=space, name__in=wanted)}
    return [by_name[name] for name in wanted]


@transaction.atomic
def update_address(*, ctx: Context, space: AddressSpace, name, plan=None, deadletter=None,
                   expiry=None, spec=None, address=None, type=None, topic=None,
                   expected_version=None):
    """Changes plan, deadletter/expiry and TTL/redelivery; address, type and topic are fixed."""
    stream, space = _locked_space(space)
    _refuse_if_terminating(space)
    current = Address.objects.filter(space=space, name=name).first()
    if current is None:
        raise NotFound(f"No address {name!r} in {space.name}.")
    _check_version(current.resource_version, expected_version)
    for field, given, fixed in (("spec.address", address, current.address),
                                ("spec.type", type, current.type),
                                ("spec.topic", topic, current.topic or None)):
        if given is not None and given != fixed:
            raise Invalid(f"{field} cannot be changed; delete and create the address instead",
                          field)
    spec = spec or {}
    extra = _address_spec(current.type, spec)
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
        scheduled, reason, placement = _try_place(
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
    _append(stream, "address.plan_changed" if plan_changed else "address.spec_changed",
            payload, ctx)
    if plan_changed:
        _schedule_pending(stream, space, ctx)
    return Address.objects.get(space=space, name=name)


@transaction.atomic
def delete_address(*, ctx: Context, space: AddressSpace, name, expected_version=None):
    stream, space = _locked_space(space)
    current = Address.objects.filter(space=space, name=name).first()
    if current is None:
        raise NotFound(f"No address {name!r} in {space.name}.")
    _check_version(current.resource_version, expected_version)
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
    _append(stream, "address.deleted", {"name": name}, ctx)
    _schedule_pending(stream, space, ctx)


STORING_TYPES = ("queue", "subscription", "deadletter")


@transaction.atomic
def purge_address(*, ctx: Context, space: AddressSpace, name) -> Address:
    """Asks for every stored message of a queue, subscription or deadletter address to be
    dropped. The storage agent carries out each `address.purged` event once, after it is
    committed; the event is the audit entry (who, when, request id)."""
    stream, space = _locked_space(space)
    _refuse_if_terminating(space)
    current = Address.objects.filter(space=space, name=name).first()
    if current is None:
        raise NotFound(f"No address {name!r} in {space.name}.")
    if current.type not in STORING_TYPES:
        raise Invalid(f"a {current.type} address stores no messages; only "
                      f"{', '.join(STORING_TYPES)} addresses can be purged", "spec.type")
    _append(stream, "address.purged", {"name": name}, ctx)
    return current


def _schedule_pending(stream, space: AddressSpace, ctx: Context) -> None:
    """Schedules Pending addresses that fit now, oldest first (topics before subscriptions)."""
    pending = Address.objects.filter(space=space, scheduled=False).order_by("created_at", "id")
    ordered = sorted(pending, key=lambda a: a.type == "subscription")
    for addr in ordered:
        ok, _, placement = _try_place(space, addr.type, addr.address, addr.plan_status,
                                      addr.topic, exclude=addr.name)
        if ok:
            _append(stream, "address.scheduled", {"name": addr.name, "placement": placement}, ctx)


# Messaging users ------------------------------------------------------------------------------

@transaction.atomic
def create_messaging_user(*, ctx: Context, space: AddressSpace, name=None, username=None,
                          authentication=None, authorization=None):
    stream, space = _locked_space(space)
    _refuse_if_terminating(space)
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
    quota = _space_quota(space)
    if quota.max_messaging_users is not None and MessagingUser.objects.filter(
        space__tenant=space.tenant
    ).count() >= quota.max_messaging_users:
        raise QuotaExceeded(
            f"Tenant quota of {quota.max_messaging_users} messaging users reached.",
            "spec.username",
        )
    _append(stream, "messaging_user.created", {
        "name": name, "username": username, "password_hash": hash_password(clear),
        "authorization": rules,
    }, ctx)
    return MessagingUser.objects.get(space=space, name=name)


@transaction.atomic
def update_messaging_user(*, ctx: Context, space: AddressSpace, name, username=None,
                          authentication=None, authorization=None, expected_version=None):
    stream, space = _locked_space(space)
    _refuse_if_terminating(space)
    current = MessagingUser.objects.filter(space=space, name=name).first()
    if current is None:
        raise NotFound(f"No messaging user {name!r} in {space.name}.")
    _check_version(current.resource_version, expected_version)
    if username is not None and username != current.username:
        raise Invalid("spec.username cannot be changed", "spec.username")
    clear = validation.password(authentication)
    rules = (current.authorization if authorization is None
             else validation.authorization(authorization, space.type))
    password_hash = current.password_hash if clear is None else hash_password(clear)
    if password_hash == current.password_hash and rules == current.authorization:
        return current
    _append(stream, "messaging_user.updated",
            {"name": name, "password_hash": password_hash, "authorization": rules}, ctx)
    return MessagingUser.objects.get(space=space, name=name)


@transaction.atomic
def delete_messaging_user(*, ctx: Context, space: AddressSpace, name, expected_version=None):
    stream, space = _locked_space(space)
    current = MessagingUser.objects.filter(space=space, name=name).first()
    if current is None:
        raise NotFound(f"No messaging user {name!r} in {space.name}.")
    _check_version(current.resource_version, expected_version)
    _append(stream, "messaging_user.deleted", {"name": name}, ctx)


def address_counts(space_ids) -> dict:
    rows = Address.objects.filter(space_id__in=space_ids).values("space_id").annotate(n=Count("id"))
    return {r["space_id"]: r["n"] for r in rows}


# Tenants ---------------------------------------------------------------------------------------
# What tenants.services and tenants.invitations (the layer above) need of the config log and of
# a tenant's address spaces: they never reach into the log or the projections themselves.

def open_tenant_stream(tenant: Tenant) -> None:
    log.open_stream(tenant.uid, EventStream.TENANT, tenant)


def lock_tenant_stream(tenant: Tenant) -> EventStream:
    """Locks the tenant's stream: its writers queue up here (inside their transaction)."""
    return log.lock_stream(tenant.uid)


def append_tenant_event(tenant: Tenant, type_name: str, payload: dict, *, ctx: Context,
                        stream: EventStream | None = None):
    """Appends a tenant event in the caller's transaction (locking the stream unless given)."""
    return _append(stream or log.lock_stream(tenant.uid), type_name, payload, ctx)


def has_address_spaces(tenant: Tenant) -> bool:
    return AddressSpace.objects.filter(tenant=tenant).exists()


def address_space_names(tenant: Tenant) -> list[str]:
    return list(AddressSpace.objects.filter(tenant=tenant).order_by("name")
                .values_list("name", flat=True))


def delete_tenant_spaces(*, ctx: Context, tenant: Tenant) -> None:
    """Deletes every address space of a tenant being deleted; one already Terminating is left
    to its finalizer."""
    for space in AddressSpace.objects.filter(tenant=tenant, terminating=False).order_by("name"):
        delete_address_space(ctx=ctx, space=space)


def wake_tenant_spaces(tenant: Tenant) -> None:
    """After commit, wakes the agents of every space of the tenant: a throttle lives in the
    routers but changes no space's sequence."""
    uids = list(AddressSpace.objects.filter(tenant=tenant).values_list("uid", flat=True))
    transaction.on_commit(lambda: [fanout.notify_space(uid) for uid in uids], robust=True)


# Plans -----------------------------------------------------------------------------------------
# Operators' plans: each change is an event of the one plans stream (no tenant), written beside
# the plan's row. A change of credits re-places the addresses of every space that uses the plan,
# through events of those spaces' own streams, so their agents apply it.

def _plan_event(type_name: str, payload: dict, ctx: Context) -> None:
    _append(log.lock_plans_stream(), type_name, payload, ctx)


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
    fields = plan_specs.address_plan_fields(spec)
    log.lock_plans_stream()
    plan = _locked_address_plan(name)
    _check_version(plan.resource_version, expected_version)
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
            _reevaluate_space(space, ctx, {name: status})
    logger.info("plan.changed", extra={"plan": name, "kind": "AddressPlan",
                                       "replaced": status != before})
    return plan


@transaction.atomic
def delete_address_plan(*, ctx: Context, name, expected_version=None) -> None:
    log.lock_plans_stream()
    plan = _locked_address_plan(name)
    _check_version(plan.resource_version, expected_version)
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
    fields = plan_specs.space_plan_fields(spec)
    names = fields.pop("address_plans")
    log.lock_plans_stream()
    plan = _locked_space_plan(name)
    _check_version(plan.resource_version, expected_version)
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
            stream, space = _locked_space(space)
            _append(stream, "address_space.plan_changed",
                    {"plan": name, "plan_status": space_plan_status(plan)}, ctx)
            space.refresh_from_db()
            _reevaluate_space(space, ctx, {})
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
    _check_version(plan.resource_version, expected_version)
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


def _reevaluate_space(space: AddressSpace, ctx: Context, new_status: dict[str, dict]) -> None:
    """Re-places a space's addresses after an operator changed plans (EnMasse's re-scheduling).

    `new_status`: address plan name -> its new plan status. Scheduled addresses keep their
    placement and are counted in the order they were created, then those of a changed plan are
    placed again with their new credits; one that no longer fits the space plan (or the
    tenant's credits) goes Pending with "Quota exceeded", and its subscriptions with it. Pending
    addresses that fit now are scheduled. Each change is an event of the space's stream, so its
    agents apply it.
    """
    stream, space = _locked_space(space)
    quota = _space_quota(space)
    others = _tenant_credits(space.tenant, space) if quota.max_credits is not None else 0.0
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
        _append(stream, "address.plan_changed", {
            "name": a.name, "plan": a.plan, "plan_status": status, "deadletter": a.deadletter,
            "expiry": a.expiry, "spec": a.spec, "scheduled": ok, "pending_reason": reason,
            "placement": placement,
        }, ctx)
        if a.scheduled and not ok:
            logger.info("address.unscheduled", extra={"space": str(space.uid),
                                                      "address": a.name, "reason": reason})
    _schedule_pending(stream, space, ctx)
