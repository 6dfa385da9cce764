"""The statements an agent's run reads, written by hand (`maas.core.rows` says why).

Each does what the ORM queries it replaces did, instances and related caches alike;
tests/workers/test_agent_statements.py runs both and compares them. Only what every change's
run reads lives here: the space with its tenant, the agent's state and the events it has not
applied (one statement, where the ORM took three), and the router agent's new addresses, the
space's messaging users and the tenant's throttle with the plan's router policy. Building them
with the ORM was about a third of the router agent's CPU for a new anycast address.
"""
from functools import cache

from django.db import connection

from config_service.models import Address, AddressSpace, AgentState, ConfigEvent, MessagingUser
from maas.core.rows import Columns, fetch
from maas.core.rows import table as _table
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
        # The events as base._events_after orders and limits them; not read (NULL) when
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
