"""Rebuilds the projections from the config log and compares them with the live ones.

Address spaces, addresses and users are projections (`projections.py`). A tenant's members,
their roles and its quota are written by `tenants.services` beside their tenant events, and
plans by the plan service functions beside the plans stream's events; the rebuild folds those
events into the same state and sets the tables to it, so the check also finds a membership,
quota or plan changed without its event (or an event that says otherwise). Plans the log never
names (installed by the migration, untouched since) are left as they are.
"""
from django.contrib.auth import get_user_model
from django.db import transaction

from eventlog.events import upcast
from eventlog.models import ConfigEvent
from tenants.models import (
    QUOTA_FIELDS,
    AddressPlan,
    AddressSpacePlan,
    Membership,
    Tenant,
    TenantQuota,
)

from . import plan_specs, projections
from .models import Address, AddressSpace, MessagingUser


def snapshot() -> dict:
    """The projections by natural key, without surrogate ids."""
    spaces = {
        str(s.uid): {k: getattr(s, k) for k in (
            "tenant_id", "name", "type", "plan", "plan_status", "spec", "resource_version",
            "last_sequence", "terminating", "broker", "created_at", "updated_at")}
        for s in AddressSpace.objects.all()
    }
    addresses = {
        (str(a.space.uid), a.name): {k: getattr(a, k) for k in (
            "address", "type", "plan", "plan_status", "topic", "deadletter", "expiry", "spec",
            "scheduled", "pending_reason", "placement", "resource_version", "created_at",
            "updated_at")}
        for a in Address.objects.select_related("space")
    }
    users = {
        (str(u.space.uid), u.name): {k: getattr(u, k) for k in (
            "username", "password_hash", "authorization", "resource_version", "created_at",
            "updated_at")}
        for u in MessagingUser.objects.select_related("space")
    }
    return {"spaces": spaces, "addresses": addresses, "users": users, "tenants": _tenants(),
            "plans": _plans()}


def _plans() -> dict:
    plans = {("AddressPlan", p.name): plan_specs.address_plan_spec(p)
             for p in AddressPlan.objects.all()}
    for p in AddressSpacePlan.objects.prefetch_related("address_plans"):
        names = sorted(a.name for a in p.address_plans.all())
        plans[("AddressSpacePlan", p.name)] = plan_specs.space_plan_spec(p, names)
    return plans


def _tenants() -> dict:
    members: dict = {}
    for m in Membership.objects.select_related("user"):
        members.setdefault(m.tenant_id, {})[m.user.get_username()] = m.role
    quotas = {q.tenant_id: q for q in TenantQuota.objects.all()}
    out = {}
    for t in Tenant.objects.all():
        q = quotas.get(t.pk)
        out[str(t.uid)] = {
            "deleted": t.deleted_at is not None,
            "members": members.get(t.pk, {}),
            "quota": q and {f: getattr(q, f) for f in QUOTA_FIELDS},
            "throttled": q and q.throttled,
            "throttled_limits": q and q.throttled_limits,
        }
    return out


def replay() -> int:
    """Deletes the projections and applies the whole log again, in order."""
    AddressSpace.objects.all().delete()
    count = 0
    tenants: dict[int, dict] = {}
    plans: dict[tuple[str, str], dict | None] = {}
    for event in ConfigEvent.objects.order_by("position").iterator(chunk_size=2000):
        projections.apply(event)
        if event.type.startswith("tenant."):
            _fold_tenant(tenants, event)
        elif event.type in _PLAN_KINDS:
            p = upcast(event.type, event.schema_version, event.payload)
            plans[(_PLAN_KINDS[event.type], p["name"])] = p.get("spec")  # None: deleted
        count += 1
    _write_tenants(tenants)
    _write_plans(plans)
    return count


_PLAN_KINDS = {f"{prefix}.{verb}": kind
               for prefix, kind in (("address_plan", "AddressPlan"),
                                    ("address_space_plan", "AddressSpacePlan"))
               for verb in ("created", "changed", "deleted")}


def _write_plans(plans: dict[tuple[str, str], dict | None]) -> None:
    """Sets every plan the log names to its last event: address plans first, since space
    plans offer them, and deletions last."""
    for (kind, name), spec in sorted(plans.items()):  # AddressPlan sorts first
        if spec is None:
            continue
        if kind == "AddressPlan":
            AddressPlan.objects.update_or_create(
                name=name, defaults=plan_specs.address_plan_fields(spec))
        else:
            fields = plan_specs.space_plan_fields(spec)
            offered = AddressPlan.objects.filter(name__in=fields.pop("address_plans"))
            plan, _ = AddressSpacePlan.objects.update_or_create(name=name, defaults=fields)
            plan.address_plans.set(offered)
    for (kind, name), spec in sorted(plans.items(), reverse=True):
        if spec is None:
            (AddressPlan if kind == "AddressPlan" else AddressSpacePlan).objects.filter(
                name=name).delete()


def _fold_tenant(tenants: dict[int, dict], event: ConfigEvent) -> None:
    """One tenant event applied to its tenant's state (members, quota, throttle)."""
    p = upcast(event.type, event.schema_version, event.payload)
    t = tenants.setdefault(event.tenant_id, {  # as tenant.created leaves it
        "deleted_at": None, "members": {},
        "quota": {f: TenantQuota._meta.get_field(f).get_default() for f in QUOTA_FIELDS},
        "throttled": False, "throttled_limits": [],
    })
    if event.type in ("tenant.member_added", "tenant.member_role_changed"):
        t["members"][p["username"]] = p["role"]
    elif event.type == "tenant.member_removed":
        t["members"].pop(p["username"], None)
    elif event.type == "tenant.quota_changed":
        t["quota"].update({f: p["quota"][f] for f in QUOTA_FIELDS})
    elif event.type == "tenant.throttled":
        t["throttled"], t["throttled_limits"] = True, p["limits"]
    elif event.type == "tenant.unthrottled":
        t["throttled"], t["throttled_limits"] = False, []
    elif event.type == "tenant.deleted":
        t["deleted_at"], t["members"] = event.created_at, {}
    # invitation events change no member: an accepted one comes with tenant.member_added


def _write_tenants(tenants: dict[int, dict]) -> None:
    """Sets each tenant's members, roles, quota limits and throttle to what its log says."""
    users = get_user_model()
    for tenant in Tenant.objects.filter(pk__in=tenants):
        t = tenants[tenant.pk]
        if (tenant.deleted_at is None) != (t["deleted_at"] is None):
            tenant.deleted_at = t["deleted_at"]
            tenant.save(update_fields=["deleted_at"])
        have = {m.user.get_username(): m for m in
                Membership.objects.filter(tenant=tenant).select_related("user")}
        for username, membership in have.items():
            if username not in t["members"]:
                membership.delete()
            elif membership.role != t["members"][username]:
                membership.role = t["members"][username]
                membership.save(update_fields=["role"])
        missing = set(t["members"]) - set(have)
        for user in users.objects.filter(**{users.USERNAME_FIELD + "__in": missing}):
            Membership.objects.create(tenant=tenant, user=user,
                                      role=t["members"][user.get_username()])
        TenantQuota.objects.update_or_create(tenant=tenant, defaults={
            **t["quota"], "throttled": t["throttled"], "throttled_limits": t["throttled_limits"]})


def differences(before: dict, after: dict) -> list[str]:
    out = []
    for kind in before:
        for key in sorted(set(before[kind]) | set(after[kind]), key=str):
            if before[kind].get(key) != after[kind].get(key):
                out.append(f"{kind} {key}: live {before[kind].get(key)} != "
                           f"rebuilt {after[kind].get(key)}")
    return out


class _Rollback(Exception):
    pass


def rebuild(check_only: bool) -> tuple[int, list[str]]:
    """(events replayed, differences); with check_only nothing is kept."""
    result: tuple[int, list[str]] = (0, [])
    try:
        with transaction.atomic():
            before = snapshot()
            count = replay()
            result = (count, differences(before, snapshot()))
            if check_only:
                raise _Rollback
    except _Rollback:
        pass
    return result
