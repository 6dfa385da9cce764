"""The statements of an agent's run, written by hand: what it reads (`core.rows` says why) and
what it records.

Each does what the ORM queries it replaces did, instances and related caches alike;
tests/workers/test_agent_statements.py runs both and compares them. Only what every change's
run reads lives here: the space with its tenant, the agent's state and the events it has not
applied (one statement, where the ORM took three), and the router agent's new addresses, the
space's messaging users and the tenant's throttle with the plan's router policy. Building them
with the ORM was about a third of the router agent's CPU for a new anycast address.
"""
from functools import cache

from django.db import connection

from config_service.models import Address, AddressSpace, AgentState, AppliedEvent, MessagingUser
from core.rows import Columns, fetch
from core.rows import table as _table
from eventlog.models import ConfigEvent, Outbox
from tenants.models import AddressSpacePlan, Tenant, TenantQuota


@cache
def _columns() -> dict[str, Columns]:
    # Built on first use, not at import: quoting asks the connection's backend.
    return {"space": Columns(AddressSpace, "s"), "tenant": Columns(Tenant, "t"),
            "state": Columns(AgentState, "a"), "address": Columns(Address, "ad"),
            "user": Columns(MessagingUser, "u")}


@cache
def _sql() -> dict[str, str]:
    c = _columns()
    return {
        # The events as runner._events_after orders and limits them; not read (NULL) when
        # %(events)s is false, none (an empty array) when there are none.
        "run": f"""
            SELECT {c['space'].sql}, {c['tenant'].sql}, {c['state'].sql},
                   CASE WHEN %(events)s THEN COALESCE((
                       SELECT json_agg(json_build_array(e.type, e.payload) ORDER BY e.sequence)
                       FROM (SELECT type, payload, sequence FROM {_table(ConfigEvent)}
                             WHERE stream_id = s.uid
                               AND sequence > COALESCE(a.applied_sequence, 0)
                             ORDER BY sequence LIMIT %(limit)s) e), '[]'::json) END
            FROM {_table(AddressSpace)} s
            JOIN {_table(Tenant)} t ON t.id = s.tenant_id
            LEFT JOIN {_table(AgentState)} a ON a.space_uid = s.uid AND a.kind = %(kind)s
            WHERE s.uid = %(uid)s""",
        "named": f"SELECT {c['address'].sql} FROM {_table(Address)} ad "
                 "WHERE ad.space_id = %s AND ad.scheduled AND ad.name = ANY(%s)",
        "users": f"SELECT {c['user'].sql} FROM {_table(MessagingUser)} u "
                 "WHERE u.space_id = %s ORDER BY u.username",
        # A plan's name is unique.
        "throttle": f"""
            SELECT EXISTS (SELECT 1 FROM {_table(TenantQuota)}
                           WHERE tenant_id = %(tenant)s AND throttled),
                   (SELECT router_policy FROM {_table(AddressSpacePlan)} WHERE name = %(plan)s)
            FROM {_table(Tenant)} WHERE id = %(tenant)s""",
    }


def run_start(space_uid, kind: str, with_events: bool, limit: int):
    """(space with its tenant, the agent kind's state or None, the events after the state's
    sequence, or 0's, as [(type, payload)] up to `limit` of them, or None if not
    `with_events`), or None: no such space. One snapshot: the events go up to the space's
    last sequence, not past it."""
    rows = fetch(_sql()["run"], {"uid": space_uid, "kind": kind, "events": with_events,
                                 "limit": limit})
    if not rows:
        return None
    c = _columns()
    row = rows[0]
    space, at = c["space"].take(row)
    tenant, at = c["tenant"].take(row, at)
    AddressSpace.tenant.field.set_cached_value(space, tenant)
    state, at = c["state"].take(row, at)
    events = row[at]
    if events is not None:
        events = [(t, p) for t, p in events]
    return space, state, events


def addresses_named(space: AddressSpace, names: list[str]) -> list[Address]:
    """The space's scheduled addresses of these names, each with its space cached."""
    take = _columns()["address"].take
    found = []
    for row in fetch(_sql()["named"], [space.pk, list(names)]):
        address = take(row)[0]
        Address.space.field.set_cached_value(address, space)
        found.append(address)
    return found


def messaging_users(space: AddressSpace) -> list[MessagingUser]:
    """The space's messaging users by username, each with its space cached."""
    take = _columns()["user"].take
    users = []
    for row in fetch(_sql()["users"], [space.pk]):
        user = take(row)[0]
        MessagingUser.space.field.set_cached_value(user, space)
        users.append(user)
    return users


def throttle_and_plan_policy(space: AddressSpace) -> tuple[bool, dict | None]:
    """Whether the space's tenant is throttled, and its plan's router policy (None if the plan
    has none or is gone); (False, None) if the tenant is gone."""
    rows = fetch(_sql()["throttle"], {"tenant": space.tenant_id, "plan": space.plan})
    if not rows:
        return False, None
    throttled, policy = rows[0]
    col = AddressSpacePlan._meta.get_field("router_policy").get_col(AddressSpacePlan._meta.db_table)
    for convert in connection.ops.get_db_converters(col) + col.get_db_converters(connection):
        policy = convert(policy, col, connection)  # jsonb comes as text, as for the ORM
    return bool(throttled), policy


# What a run records (runner.run, runner.record_unaffected) and reads before it (space_to_run),
# each in one statement.

_TABLES = {"state": AgentState._meta.db_table, "spaces": AddressSpace._meta.db_table,
           "applied": AppliedEvent._meta.db_table, "events": ConfigEvent._meta.db_table,
           "outbox": Outbox._meta.db_table}

_RECORD = """
WITH old AS (
    SELECT id, applied_sequence, invalidated_at FROM {state}
    WHERE space_uid = %(uid)s AND kind = %(kind)s FOR UPDATE
), recorded AS (
    UPDATE {state} s SET
        applied_sequence = GREATEST(old.applied_sequence, %(target)s),
        applied_at = %(now)s,
        checked_at = CASE WHEN %(checked)s THEN %(now)s ELSE s.checked_at END,
        address_errors = %(errors)s::jsonb,
        space_error = %(space_error)s,
        torn_down = s.torn_down OR %(terminating)s,
        invalidated = CASE WHEN old.invalidated_at IS NULL OR old.invalidated_at < %(started)s
                           THEN '' ELSE s.invalidated END,
        invalidated_at = CASE WHEN old.invalidated_at IS NULL
                                   OR old.invalidated_at < %(started)s
                              THEN NULL ELSE s.invalidated_at END
    FROM old WHERE s.id = old.id
    RETURNING old.applied_sequence AS after
), {applied_events}
"""

# An AppliedEvent per event the `recorded` CTE newly covers (after it, up to `{target}`), with
# its latency: `.format(target=...)`, then into a statement as its `applied_events`.
_APPLIED = """applied AS (
    INSERT INTO {applied} (event_id, kind, applied_at, latency_seconds)
    SELECT e.position, %(kind)s, %(now)s, EXTRACT(EPOCH FROM %(now)s - e.created_at)::float8
    FROM {events} e, recorded
    WHERE e.stream_id = %(uid)s AND e.sequence > recorded.after AND e.sequence <= {target}
    ON CONFLICT DO NOTHING
)"""

# Whether a state's address errors hold one not marked permanent (`_settled`'s test in SQL, so
# that thousands of errors during a fill are not loaded): `.format(column=...)`.
RETRYABLE_ERRORS = "jsonb_path_exists({column}, '$.* ? (!exists(@.permanent ? (@ == true)))')"

# Acknowledged: up to the lowest sequence the space's installed agents applied, the recording
# one's new sequence and outcome counted (the statement's snapshot holds its old ones); none
# while one of them has no state yet, when the type has no agent installed here, or while one
# of them has something to retry (`_settled`: invalidated, a space error, an address error
# not permanent). So the relay re-sends an event until its addresses are really configured:
# an autoLink still inactive after the router agent's wait is retried within
# MAAS_RELAY_AFTER_SECONDS, not at the next resync. `{target}` is the recording kind's new
# sequence and `{own_clean}` whether its outcome leaves nothing to retry.
_ACK = """
UPDATE {outbox} SET acked_at = %(now)s
WHERE stream_uid = %(uid)s AND acked_at IS NULL AND %(nkinds)s > 0 AND sequence <= (
    SELECT MIN(CASE WHEN kind = %(kind)s THEN GREATEST(applied_sequence, {target})
                    ELSE applied_sequence END)
    FROM {state} WHERE space_uid = %(uid)s AND kind = ANY(%(kinds)s)
    HAVING COUNT(DISTINCT kind) = %(nkinds)s AND BOOL_AND(CASE
        WHEN kind = %(kind)s THEN {own_clean} ELSE {clean} END)
)
"""

# A state with nothing to retry, as its row stands (`_settled`).
_CLEAN = ("invalidated = '' AND space_error = '' AND NOT "
          + RETRYABLE_ERRORS.format(column="address_errors"))

# `record_unaffected`: the state moved to the space's last sequence if every event after its
# own creates an address of %(types)s and the state is clean of what a run would repair, with
# the AppliedEvent rows and the outbox acknowledged (`_ACK`, this state's new sequence counted,
# its errors as they are, and nothing acknowledged when nothing was recorded); the sequence
# recorded, or no row.
_UNAFFECTED = """
WITH old AS (
    SELECT s.id, s.applied_sequence, sp.last_sequence AS target
    FROM {state} s JOIN {spaces} sp ON sp.uid = s.space_uid
    WHERE s.space_uid = %(uid)s AND s.kind = %(kind)s AND NOT sp.terminating
      AND s.applied_at IS NOT NULL AND s.invalidated = ''
      AND s.applied_sequence < sp.last_sequence
      AND NOT EXISTS (
          SELECT 1 FROM {events} e
          WHERE e.stream_id = %(uid)s AND e.sequence > s.applied_sequence
            AND e.sequence <= sp.last_sequence
            AND (e.type <> 'address.created'
                 OR COALESCE(e.payload ->> 'type', '') <> ALL(%(types)s)))
    FOR UPDATE OF s
), recorded AS (
    UPDATE {state} s SET applied_sequence = old.target, applied_at = %(now)s
    FROM old WHERE s.id = old.id
    RETURNING old.applied_sequence AS after, old.target
), {applied_events}, acked AS ({ack})
SELECT target FROM recorded
"""

# `space_to_run`: the events as `_events_after` orders and limits them, in a JSON array.
_SPACE_TO_RUN = """
SELECT sp.type, sp.terminating, asked.yes, CASE WHEN asked.yes THEN (
    SELECT json_agg(json_build_array(e.type, e.payload) ORDER BY e.sequence) FROM (
        SELECT type, payload, sequence FROM {events}
        WHERE stream_id = sp.uid AND sequence > COALESCE((
            SELECT applied_sequence FROM {state} WHERE space_uid = sp.uid AND kind = %(kind)s
        ), 0)
        ORDER BY sequence LIMIT %(limit)s) e
) END
FROM {spaces} sp, LATERAL (SELECT NOT sp.terminating AND sp.type = ANY(%(types)s) AS yes) asked
WHERE sp.uid = %(uid)s
"""

SPACE_TO_RUN_SQL = _SPACE_TO_RUN.format(**_TABLES)
ACK_SQL = _ACK.format(**_TABLES, target="%(target)s", clean=_CLEAN, own_clean=(
    "%(settled)s AND (invalidated_at IS NULL OR invalidated_at < %(started)s)"))
RECORD_SQL = _RECORD.format(
    **_TABLES, applied_events=_APPLIED.format(**_TABLES, target="%(target)s")) + ACK_SQL
UNAFFECTED_SQL = _UNAFFECTED.format(
    **_TABLES, applied_events=_APPLIED.format(**_TABLES, target="recorded.target"),
    ack=_ACK.format(**_TABLES, target="(SELECT target FROM recorded)", clean=_CLEAN,
                    own_clean="EXISTS (SELECT 1 FROM recorded) AND " + _CLEAN))
