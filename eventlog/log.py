"""Appends config events: next sequence of the stream, projection update and outbox row.

Callers are service functions already inside `transaction.atomic`; the fan-out (which `workers`
registers, see `fanout`) is sent only after the transaction commits, and the outbox relay
re-sends it if that send is lost. The projections of address spaces are `config_service`'s,
which registers them at start-up (`register_projections`): the log imports no app above it.
"""
import logging
import uuid
from typing import Protocol

from django.db import transaction
from django.utils import timezone

from . import fanout
from .events import validate
from .models import ConfigEvent, EventStream, Outbox

logger = logging.getLogger(__name__)


class Projections(Protocol):
    """How appended events change the current-state tables, in the appending transaction."""

    def apply(self, event: ConfigEvent, space=None):
        """Projects one event; returns the row it created, if any (an address.created's)."""

    def apply_many(self, events: list[ConfigEvent]) -> None: ...


_projections: Projections | None = None


def register_projections(projections: Projections) -> None:
    """Installs the projections every append updates (config_service/apps.py)."""
    global _projections
    _projections = projections


def _projected() -> Projections:
    if _projections is None:
        raise RuntimeError("no projections registered: config_service is not installed")
    return _projections


def open_stream(uid: uuid.UUID, kind: str, tenant) -> EventStream:
    return EventStream.objects.create(uid=uid, kind=kind, tenant=tenant)


# The one stream of the operators' plans: a fixed id, opened by its first writer.
PLANS_STREAM = uuid.uuid5(uuid.NAMESPACE_URL, "https://maas.io/streams/plans")


def lock_plans_stream() -> EventStream:
    """Locks the plans stream (opening it if need be): plan writers queue up here."""
    EventStream.objects.bulk_create([EventStream(uid=PLANS_STREAM, kind=EventStream.PLANS)],
                                    ignore_conflicts=True)
    return lock_stream(PLANS_STREAM)


def lock_stream(uid) -> EventStream:
    """Locks the stream row; concurrent writers to the same space queue up here."""
    return EventStream.objects.select_for_update().get(uid=uid)


# The stream's next sequence, the event and (for a space's stream) its outbox row in one round
# trip: a create's statements each wait for a core again on a loaded machine.
_APPEND = f"""
WITH moved AS (UPDATE {EventStream._meta.db_table} SET last_sequence = %(sequence)s
               WHERE uid = %(stream)s),
     event AS (INSERT INTO {ConfigEvent._meta.db_table} (stream_id, tenant_id, sequence, type,
                   schema_version, payload, actor, request_id, created_at)
               VALUES (%(stream)s, %(tenant)s, %(sequence)s, %(type)s, %(version)s,
                   %(payload)s, %(actor)s, %(request_id)s, %(at)s)
               RETURNING position),
     queued AS (INSERT INTO {Outbox._meta.db_table} (event_id, stream_uid, sequence, created_at,
                    attempts)
                SELECT position, %(stream)s, %(sequence)s, %(at)s, 0 FROM event
                WHERE %(queued)s)
SELECT position FROM event"""
_PAYLOAD = ConfigEvent._meta.get_field("payload")


def append(stream: EventStream, type_name: str, payload: dict, *, actor: str,
           request_id: str = "", space=None) -> ConfigEvent:
    """Appends one event to a locked stream, applies it to the projections, and queues it.
    `space`: the stream's AddressSpace row, if the caller holds it (spares a read). The event's
    `projected` is the row its projection created (an address.created's Address), else None."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("append() must run inside the service function's transaction")
    event_type = validate(type_name, payload)
    event = ConfigEvent(stream=stream, tenant_id=stream.tenant_id,
                        sequence=stream.last_sequence + 1, type=type_name,
                        schema_version=event_type.version, payload=payload, actor=actor,
                        request_id=request_id, created_at=timezone.now())
    queued = stream.kind == EventStream.ADDRESS_SPACE
    connection = transaction.get_connection()
    with connection.cursor() as cursor:
        cursor.execute(_APPEND, {
            "stream": stream.uid, "tenant": event.tenant_id, "sequence": event.sequence,
            "type": type_name, "version": event.schema_version, "actor": actor,
            "payload": _PAYLOAD.get_db_prep_save(payload, connection),
            "request_id": request_id, "at": event.created_at, "queued": queued})
        event.position = cursor.fetchone()[0]
    event._state.adding, event._state.db = False, connection.alias  # as if created: immutable
    stream.last_sequence = event.sequence
    event.projected = _projected().apply(event, space)
    if queued:
        transaction.on_commit(lambda: fanout.notify_space(stream.uid), robust=True)
    logger.info(
        "config_event.appended",
        extra={
            "tenant_id": stream.tenant_id,
            "stream": str(stream.uid),
            "event_type": type_name,
            "position": event.position,
            "sequence": event.sequence,
            "request_id": request_id,
        },
    )
    return event


def append_many(stream: EventStream, events: list[tuple[str, dict]], *, actor: str,
                request_id: str = "") -> list[ConfigEvent]:
    """Appends several events to a locked stream at once, as `append` would one by one: the
    same sequences, projections and outbox rows, in a few statements (bulk inserts) instead of
    some per event. The fan-out is woken once."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("append_many() must run inside the service function's transaction")
    if not events:
        return []
    now = timezone.now()
    created = []
    for type_name, payload in events:
        event_type = validate(type_name, payload)
        stream.last_sequence += 1
        created.append(ConfigEvent(
            stream=stream, tenant_id=stream.tenant_id, sequence=stream.last_sequence,
            type=type_name, schema_version=event_type.version, payload=payload, actor=actor,
            request_id=request_id, created_at=now))
    stream.save(update_fields=["last_sequence"])
    created = ConfigEvent.objects.bulk_create(created)  # PostgreSQL returns each position
    _projected().apply_many(created)
    if stream.kind == EventStream.ADDRESS_SPACE:
        Outbox.objects.bulk_create([Outbox(event=e, stream_uid=stream.uid, sequence=e.sequence)
                                    for e in created])
        transaction.on_commit(lambda: fanout.notify_space(stream.uid), robust=True)
    for event in created:
        logger.info("config_event.appended", extra={
            "tenant_id": stream.tenant_id, "stream": str(stream.uid), "event_type": event.type,
            "position": event.position, "sequence": event.sequence, "request_id": request_id})
    return created



# A tenant's own stream: its members, roles, quota and throttles (tenants.services).

def open_tenant_stream(tenant) -> None:
    open_stream(tenant.uid, EventStream.TENANT, tenant)


def lock_tenant_stream(tenant) -> EventStream:
    """Locks the tenant's stream: its writers queue up here (inside their transaction)."""
    return lock_stream(tenant.uid)


def append_tenant_event(tenant, type_name: str, payload: dict, *, ctx,
                        stream: EventStream | None = None) -> ConfigEvent:
    """Appends a tenant event in the caller's transaction (locking the stream unless given);
    `ctx` is the core.context.Context of who acts."""
    return append(stream or lock_stream(tenant.uid), type_name, payload, actor=ctx.actor,
                  request_id=ctx.request_id)
