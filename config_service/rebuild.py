"""Rebuilds the projections from the config log and compares them with the live ones."""
from django.db import transaction

from . import projections
from .models import Address, AddressSpace, ConfigEvent, MessagingUser


def snapshot() -> dict:
    """The projections by natural key, without surrogate ids."""
    spaces = {
        str(s.uid): {k: getattr(s, k) for k in (
            "tenant_id", "name", "type", "plan", "plan_status", "spec", "resource_version",
            "last_sequence", "terminating", "created_at", "updated_at")}
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
    return {"spaces": spaces, "addresses": addresses, "users": users}


def replay() -> int:
    """Deletes the projections and applies the whole log again, in order."""
    AddressSpace.objects.all().delete()
    count = 0
    for event in ConfigEvent.objects.order_by("position").iterator(chunk_size=2000):
        projections.apply(event)
        count += 1
    return count


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
