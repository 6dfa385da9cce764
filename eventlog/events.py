"""The config event types: one schema each, rejecting unknown fields, with upcasters.

An event's payload is written once and never rewritten; when a payload shape changes, its
`schema_version` goes up and an upcaster turns old payloads into the new shape on read.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class EventType:
    name: str
    version: int
    required: frozenset[str]
    optional: frozenset[str] = frozenset()


def _t(name: str, required: str, optional: str = "", version: int = 1) -> EventType:
    return EventType(name, version, frozenset(required.split()), frozenset(optional.split()))


_ADDRESS_STATE = (
    "name address type plan plan_status topic deadletter expiry spec scheduled pending_reason "
    "placement"
)
_ADDRESS_CHANGE = "name plan plan_status deadletter expiry spec scheduled pending_reason placement"

EVENT_TYPES: dict[str, EventType] = {
    t.name: t
    for t in [
        _t("tenant.created", "slug name"),
        _t("tenant.member_added", "username role"),
        _t("tenant.member_role_changed", "username role"),
        _t("tenant.member_removed", "username"),
        _t("tenant.quota_changed", "quota", "previous"),  # previous: since the quota API
        _t("tenant.throttled", "limits action"),
        _t("tenant.unthrottled", "reason"),
        _t("tenant.deleted", "slug spaces members"),
        _t("tenant.invitation_created", "id email role expires_at"),
        _t("tenant.invitation_revoked", "id email"),
        _t("tenant.invitation_accepted", "id email role username"),
        # an audit entry only: a client connection of a space closed through the API
        _t("tenant.connection_closed", "space id hostname container_id principal protocol via"),
        _t("address_space.created", "uid name type plan plan_status spec", "broker"),
        _t("address_space.plan_changed", "plan plan_status"),
        _t("address_space.spec_changed", "plan plan_status spec"),  # a PUT that drops keys
        _t("address_space.deleted", ""),
        _t("address_space.removed", ""),
        _t("address.created", _ADDRESS_STATE),
        _t("address.plan_changed", _ADDRESS_CHANGE),
        _t("address.spec_changed", _ADDRESS_CHANGE),
        _t("address.scheduled", "name placement"),
        _t("address.deleted", "name"),
        _t("address.purged", "name"),
        _t("messaging_user.created", "name username password_hash authorization"),
        _t("messaging_user.updated", "name password_hash authorization"),
        _t("messaging_user.deleted", "name"),
        # The plans stream (no tenant): an operator's plans, in EnMasse's spec shape.
        _t("address_plan.created", "name spec"),
        _t("address_plan.changed", "name spec previous"),
        _t("address_plan.deleted", "name previous"),
        _t("address_space_plan.created", "name spec"),
        _t("address_space_plan.changed", "name spec previous"),
        _t("address_space_plan.deleted", "name previous"),
    ]
}

# (type, from_version) -> function returning the payload of from_version + 1.
UPCASTERS: dict[tuple[str, int], callable] = {}

# Fields that must never leave the control plane through the events API.
SECRET_FIELDS = frozenset({"password_hash"})


class EventSchemaError(ValueError):
    pass


def validate(type_name: str, payload: dict) -> EventType:
    """The event type, if `payload` has exactly its required and allowed fields."""
    event_type = EVENT_TYPES.get(type_name)
    if event_type is None:
        raise EventSchemaError(f"unknown event type {type_name}")
    keys = set(payload)
    missing = event_type.required - keys
    unknown = keys - event_type.required - event_type.optional
    if missing or unknown:
        raise EventSchemaError(
            f"{type_name}: missing {sorted(missing)}, unknown {sorted(unknown)}"
        )
    return event_type


def upcast(type_name: str, version: int, payload: dict) -> dict:
    """The payload in the current shape of its type."""
    current = EVENT_TYPES[type_name].version
    while version < current:
        payload = UPCASTERS[(type_name, version)](payload)
        version += 1
    return payload


def public_payload(payload: dict) -> dict:
    return {k: ("<redacted>" if k in SECRET_FIELDS else v) for k, v in payload.items()}
