"""Appends config events: next sequence of the stream, projection update and outbox row.

Callers are service functions already inside `transaction.atomic`; the fan-out (which `workers`
registers, see `fanout`) is sent only after the transaction commits, and the outbox relay
re-sends it if that send is lost.
"""
import logging
import uuid

from django.db import transaction
from django.utils import timezone

from . import fanout, projections
from .events import validate
from .models import ConfigEvent, EventStream, Outbox

logger = logging.getLogger(__name__)


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
    event.projected = projections.apply(event, space)
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
    projections.apply_many(created)
    if stream.kind == EventStream.ADDRESS_SPACE:
        Outbox.objects.bulk_create([Outbox(event=e, stream_uid=stream.uid, sequence=e.sequence)
                                    for e in created])
        transaction.on_commit(lambda: fanout.notify_space(stream.uid), robust=True)
    for event in created:
        logger.info("config_event.appended", extra={
            "tenant_id": stream.tenant_id, "stream": str(stream.uid), "event_type": event.type,
            "position": event.position, "sequence": event.sequence, "request_id": request_id})
    return created

