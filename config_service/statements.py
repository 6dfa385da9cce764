"""The statements every address create runs, written by hand (`core.rows` says why).

Each does what the ORM query it replaces did, instances and related caches alike;
tests/config_service/test_statements.py runs both and compares them. Only the hot path of a
create lives here: the member's space, the stream's lock and the space read under it, the
address plan, the name clash, the usage, the quota's bound, the new address's row with its
space's sequence, and the agents' states for the answer.

`read_ahead` sends the lock and the reads after it in one round trip (a create's reads after
the lock depend on nothing but its input): five round trips fewer, each the network's round
trip time where PostgreSQL runs elsewhere (docs/scale.md, "The create's reads in one round
trip").
"""
import json
import threading
from contextlib import contextmanager
from functools import cache

from django.db import connection

from core.rows import Columns, fetch, fetch_together
from core.rows import table as _table
from eventlog.models import EventStream
from tenants.models import AddressPlan, AddressSpacePlan, Membership, Tenant, TenantQuota

from .models import Address, AddressSpace, AgentState


@cache
def _columns() -> dict[str, Columns]:
    # Built on first use, not at import: quoting asks the connection's backend.
    return {"space": Columns(AddressSpace, "s"), "tenant": Columns(Tenant, "t"),
            "quota": Columns(TenantQuota, "q"), "stream": Columns(EventStream, "e"),
            "plan": Columns(AddressPlan, "p"), "state": Columns(AgentState, "a")}


@cache
def _sql() -> dict[str, str]:
    c = _columns()
    offers = AddressSpacePlan.address_plans.field
    through = offers.remote_field.through
    return {
        # AddressSpace, its tenant and the member's role, as SpaceMixin.space's queryset.
        "member_space": f"""
            SELECT {c['space'].sql}, {c['tenant'].sql}, m.role
            FROM {_table(AddressSpace)} s
            JOIN {_table(Tenant)} t ON t.id = s.tenant_id
            JOIN {_table(Membership)} m ON m.tenant_id = t.id
            WHERE s.name = %s AND t.slug = %s AND t.deleted_at IS NULL AND m.user_id = %s
            LIMIT 1""",
        "lock": f"SELECT {c['stream'].sql} FROM {_table(EventStream)} e WHERE e.uid = %s "
                "FOR UPDATE",
        # A statement of its own after the lock: one statement's snapshot is taken before it
        # waits for the lock, and the space must be read as the previous writer left it.
        "space": f"""
            SELECT {c['space'].sql}, {c['tenant'].sql}, {c['quota'].sql}
            FROM {_table(AddressSpace)} s
            JOIN {_table(Tenant)} t ON t.id = s.tenant_id
            LEFT JOIN {_table(TenantQuota)} q ON q.tenant_id = t.id
            WHERE s.uid = %s""",
        "plan": f"""
            SELECT {c['plan'].sql}, EXISTS (
                SELECT 1 FROM {_table(through)} o
                JOIN {_table(AddressSpacePlan)} sp ON sp.id = o.{offers.m2m_column_name()}
                WHERE sp.name = %s AND o.{offers.m2m_reverse_name()} = p.id)
            FROM {_table(AddressPlan)} p WHERE p.name = %s""",
        "states": f"SELECT {c['state'].sql} FROM {_table(AgentState)} a "
                  "WHERE a.space_uid = ANY(%s::uuid[])",
        "clash": f"SELECT name, address FROM {_table(Address)} "
                 "WHERE space_id = %s AND (address = %s OR name = %s)",
        "usage": f"""
            SELECT type, plan_status -> 'resources', placement, count(id)
            FROM {_table(Address)} WHERE space_id = %s AND scheduled AND name <> %s
            GROUP BY 1, 2, 3""",
        "bound": f"SELECT coalesce(sum(last_sequence), 0) - count(*) FROM "
                 f"{_table(AddressSpace)} WHERE tenant_id = %s",
        "count": f"SELECT COUNT(*) FROM {_table(Address)} a JOIN {_table(AddressSpace)} s "
                 "ON s.id = a.space_id WHERE s.tenant_id = %s",
    }


@cache
def _insert_address() -> tuple[str, list]:
    fields = [f for f in Address._meta.concrete_fields if not f.primary_key]
    quote = connection.ops.quote_name
    sql = f"""
        WITH touched AS (UPDATE {_table(AddressSpace)} SET last_sequence = %s, updated_at = %s
                         WHERE uid = %s)
        INSERT INTO {_table(Address)} ({", ".join(quote(f.column) for f in fields)})
        VALUES ({", ".join(["%s"] * len(fields))}) RETURNING {quote(Address._meta.pk.column)}"""
    return sql, fields


def _space_with_tenant(row, start=0):
    c = _columns()
    space, at = c["space"].take(row, start)
    tenant, at = c["tenant"].take(row, at)
    AddressSpace.tenant.field.set_cached_value(space, tenant)
    return space, at


_ahead = threading.local()


@contextmanager
def read_ahead(uid, *, tenant_id: int, space_id: int, space_plan: str, plan, address: str,
               name: str):
    """Within it, the stream's lock and the reads a create of (`plan`, `address`, `name`) in
    the space makes after it are already made, together: the lock first, then each read as a
    statement of its own, in one round trip. Each read is taken once by the function that
    would make it (`lock_stream`, `space_with_quota`, `address_plan`, `clashes`,
    `addresses_bound`, `usage_groups`), for exactly the arguments it was made with; any other
    call queries as usual (the space's plan changed before the lock, say). Inside the
    create's transaction: the lock is held from here on."""
    sql = _sql()
    reads = {("lock", uid): (sql["lock"], [uid]), ("space", uid): (sql["space"], [uid])}
    if isinstance(plan, str):
        reads[("plan", plan, space_plan)] = (sql["plan"], [space_plan, plan])
    reads[("clash", space_id, address, name)] = (sql["clash"], [space_id, address, name])
    reads[("bound", tenant_id)] = (sql["bound"], [tenant_id])
    reads[("usage", space_id, "")] = (sql["usage"], [space_id, ""])
    _ahead.rows = dict(zip(reads, fetch_together(list(reads.values())), strict=True))
    try:
        yield
    finally:
        _ahead.rows = {}


def _fetch(key: tuple, sql: str, params) -> list[tuple]:
    """The rows `read_ahead` read for `key`, taken once; else the statement's own."""
    ahead = getattr(_ahead, "rows", None)
    if ahead and key in ahead:
        return ahead.pop(key)
    return fetch(sql, params)


def member_space(user_id: int, tenant_slug: str, name: str) -> AddressSpace | None:
    """The space `name` of the tenant, if `user_id` is a member: with its tenant and the
    member's role as `member_role`."""
    rows = fetch(_sql()["member_space"], [name, tenant_slug, user_id])
    if not rows:
        return None
    space, at = _space_with_tenant(rows[0])
    space.member_role = rows[0][at]
    return space


def lock_stream(uid) -> EventStream | None:
    """The stream's row, locked until the transaction ends (concurrent writers queue here)."""
    rows = _fetch(("lock", uid), _sql()["lock"], [uid])
    return _columns()["stream"].take(rows[0])[0] if rows else None


def space_with_quota(uid) -> AddressSpace | None:
    """The space with its tenant and the tenant's quota (none cached as missing, as the ORM's
    select_related leaves a missing one-to-one)."""
    rows = _fetch(("space", uid), _sql()["space"], [uid])
    if not rows:
        return None
    space, at = _space_with_tenant(rows[0])
    quota, _ = _columns()["quota"].take(rows[0], at)
    Tenant.quota.related.set_cached_value(space.tenant, quota)
    if quota is not None:
        TenantQuota.tenant.field.set_cached_value(quota, space.tenant)
    return space


def address_plan(name: str, space_plan: str) -> AddressPlan | None:
    """The address plan `name` (unique), with `offered`: whether `space_plan` offers it."""
    rows = _fetch(("plan", name, space_plan), _sql()["plan"], [space_plan, name])
    if not rows:
        return None
    plan, at = _columns()["plan"].take(rows[0])
    plan.offered = rows[0][at]
    return plan


def insert_address(address: Address, stream_uid, sequence: int, at) -> Address:
    """Inserts a new address and moves its space's last sequence in one statement (the
    projection of an address.created, which runs in every create); returns it saved."""
    sql, fields = _insert_address()
    values = [f.get_db_prep_save(f.pre_save(address, True), connection) for f in fields]
    address.pk = fetch(sql, [sequence, at, stream_uid, *values])[0][0]
    address._state.adding, address._state.db = False, connection.alias
    return address


def agent_states(space_uids: list) -> list[AgentState]:
    """The agent states of these spaces (uuids or their text)."""
    take = _columns()["state"].take
    return [take(row)[0] for row in fetch(_sql()["states"], [[str(u) for u in space_uids]])]


def clashes(space_id: int, address: str, name: str) -> list[tuple[str, str]]:
    """(name, address) of the space's addresses with this address or this name: at most two
    rows, both being unique in a space."""
    return _fetch(("clash", space_id, address, name), _sql()["clash"], [space_id, address, name])


def usage_groups(space_id: int, exclude: str = "") -> list[tuple]:
    """(type, resources, placement, count) of the space's scheduled addresses but `exclude`."""
    return [(t, _json(resources), _json(placement), n)
            for t, resources, placement, n in _fetch(("usage", space_id, exclude), _sql()["usage"],
                                                     [space_id, exclude])]


def _json(value):
    # Django has psycopg hand jsonb over as text, for the fields' own decoders.
    return json.loads(value) if isinstance(value, str) else value


def addresses_bound(tenant_id: int) -> int:
    """At most how many addresses the tenant has (services/addresses.py, _addresses_reach, says why)."""
    return _fetch(("bound", tenant_id), _sql()["bound"], [tenant_id])[0][0]


def addresses_count(tenant_id: int) -> int:
    return fetch(_sql()["count"], [tenant_id])[0][0]
