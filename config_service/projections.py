"""Applies config events to the projections; the only writer of spaces, addresses and users.

The same function serves the live path (inside the service function's transaction) and the
rebuild from the log, so both give the same rows by construction; tests compare them anyway.
"""
from eventlog.events import upcast
from eventlog.models import ConfigEvent

from . import statements
from .models import Address, AddressSpace, MessagingUser


def apply(event: ConfigEvent, space: AddressSpace | None = None) -> Address | None:
    """Applies one event; an address.created returns the Address it inserted. `space`, the
    event's space row if the caller holds it, spares reading it again."""
    handler = _HANDLERS.get(event.type)
    if handler is None:
        return None  # tenant and plan events have no projection here
    payload = upcast(event.type, event.schema_version, event.payload)
    if handler is _address_created:
        return handler(event, payload, space)
    handler(event, payload)
    return None


def apply_many(events: list[ConfigEvent]) -> None:
    """`apply` of each event, in order; a run of address creations of one stream is inserted
    in one statement, with the space touched once for the run (the same rows as one by one)."""
    run: list = []

    def flush():
        if run:
            space = _space(run[0])
            Address.objects.bulk_create([_new_address(space, e, upcast(
                e.type, e.schema_version, e.payload)) for e in run])
            _touch_space(run[-1])
            run.clear()

    for event in events:
        if event.type == "address.created" and (not run or run[0].stream_id == event.stream_id):
            run.append(event)
            continue
        flush()
        if event.type == "address.created":
            run.append(event)
        else:
            apply(event)
    flush()


def _space(event: ConfigEvent) -> AddressSpace:
    return AddressSpace.objects.get(uid=event.stream_id)


def _touch_space(event: ConfigEvent, changed: bool = False) -> None:
    fields = {"last_sequence": event.sequence, "updated_at": event.created_at}
    if changed:
        fields["resource_version"] = event.sequence
    AddressSpace.objects.filter(uid=event.stream_id).update(**fields)


def _space_created(event, p):
    AddressSpace.objects.create(
        uid=p["uid"],
        tenant_id=event.tenant_id,
        name=p["name"],
        type=p["type"],
        plan=p["plan"],
        plan_status=p["plan_status"],
        spec=p["spec"],
        broker=p.get("broker", ""),  # absent before placement: the shared broker
        resource_version=event.sequence,
        last_sequence=event.sequence,
        created_at=event.created_at,
        updated_at=event.created_at,
    )


def _space_plan_changed(event, p):
    AddressSpace.objects.filter(uid=event.stream_id).update(
        plan=p["plan"], plan_status=p["plan_status"]
    )
    _touch_space(event, changed=True)


def _space_spec_changed(event, p):
    AddressSpace.objects.filter(uid=event.stream_id).update(
        plan=p["plan"], plan_status=p["plan_status"], spec=p["spec"]
    )
    _touch_space(event, changed=True)


def _space_deleted(event, p):
    AddressSpace.objects.filter(uid=event.stream_id).update(terminating=True)
    _touch_space(event, changed=True)


def _address_purged(event, p):
    _touch_space(event)  # nothing in the projections changes: the storage agent acts on it


def _space_removed(event, p):
    AddressSpace.objects.filter(uid=event.stream_id).delete()  # cascades to addresses, users


_ADDRESS_FIELDS = (
    "plan plan_status deadletter expiry spec scheduled pending_reason placement".split()
)


def _address_created(event, p, space=None) -> Address:
    address = _new_address(space or _space(event), event, p)
    # the row and _touch_space's update in one statement, by hand: every create runs it
    return statements.insert_address(address, event.stream_id, event.sequence, event.created_at)


def _new_address(space, event, p) -> Address:
    return Address(
        space=space,
        name=p["name"],
        address=p["address"],
        type=p["type"],
        topic=p["topic"],
        **{f: p[f] for f in _ADDRESS_FIELDS},
        resource_version=event.sequence,
        created_at=event.created_at,
        updated_at=event.created_at,
    )


def _address_changed(event, p):
    _update_address(event, p["name"], **{f: p[f] for f in _ADDRESS_FIELDS})


def _address_scheduled(event, p):
    _update_address(event, p["name"], scheduled=True, pending_reason="", placement=p["placement"])


def _update_address(event, name, **fields):
    Address.objects.filter(space__uid=event.stream_id, name=name).update(
        **fields, resource_version=event.sequence, updated_at=event.created_at
    )
    _touch_space(event)


def _address_deleted(event, p):
    Address.objects.filter(space__uid=event.stream_id, name=p["name"]).delete()
    _touch_space(event)


def _user_created(event, p):
    MessagingUser.objects.create(
        space=_space(event),
        name=p["name"],
        username=p["username"],
        password_hash=p["password_hash"],
        authorization=p["authorization"],
        resource_version=event.sequence,
        created_at=event.created_at,
        updated_at=event.created_at,
    )
    _touch_space(event)


def _user_updated(event, p):
    MessagingUser.objects.filter(space__uid=event.stream_id, name=p["name"]).update(
        password_hash=p["password_hash"],
        authorization=p["authorization"],
        resource_version=event.sequence,
        updated_at=event.created_at,
    )
    _touch_space(event)


def _user_deleted(event, p):
    MessagingUser.objects.filter(space__uid=event.stream_id, name=p["name"]).delete()
    _touch_space(event)


_HANDLERS = {
    "address_space.created": _space_created,
    "address_space.plan_changed": _space_plan_changed,
    "address_space.spec_changed": _space_spec_changed,
    "address_space.deleted": _space_deleted,
    "address_space.removed": _space_removed,
    "address.created": _address_created,
    "address.plan_changed": _address_changed,
    "address.spec_changed": _address_changed,
    "address.scheduled": _address_scheduled,
    "address.deleted": _address_deleted,
    "address.purged": _address_purged,
    "messaging_user.created": _user_created,
    "messaging_user.updated": _user_updated,
    "messaging_user.deleted": _user_deleted,
}
