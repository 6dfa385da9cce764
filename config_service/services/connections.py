"""A space's client connections: read from its router or broker (config_service/readings.py),
and closed by a tenant admin or an operator. A close is recorded on the tenant's stream as
`tenant.connection_closed` (the audit trail), not on the space's: it changes no configuration
and wakes no agent."""
from django.db import transaction

from core.context import Context
from core.errors import NotFound
from eventlog.log import append_tenant_event, lock_tenant_stream

from .. import readings
from ..models import AddressSpace
from ..readings import Connection


def list_connections(space: AddressSpace, links: bool = False) -> list[Connection]:
    """The space's client connections now, oldest first (with `links`, each with its links);
    core.errors.Unavailable when its router or broker does not answer."""
    found = readings.get().connections(space, links)
    return sorted(found, key=lambda c: (c.opened_at or 0, c.id))


def find_connection(space: AddressSpace, connection_id: str) -> Connection:
    found = next((c for c in readings.get().connections(space, links=True)
                  if c.id == connection_id), None)
    if found is None:
        raise NotFound(f"No connection {connection_id!r} in {space.name}.")
    return found


@transaction.atomic
def close_connection(*, ctx: Context, space: AddressSpace, connection_id: str) -> Connection:
    """Closes one client connection of the space; its client sees a forced close and may
    reconnect. The tenant's stream is locked first, so a close that cannot be recorded is not
    made."""
    stream = lock_tenant_stream(space.tenant)
    closed = readings.get().close_connection(space, connection_id)
    if closed is None:
        raise NotFound(f"No connection {connection_id!r} in {space.name}.")
    append_tenant_event(space.tenant, "tenant.connection_closed", {
        "space": space.name, "id": closed.id, "hostname": closed.hostname,
        "container_id": closed.container_id, "principal": closed.principal,
        "protocol": closed.protocol, "via": closed.via}, ctx=ctx, stream=stream)
    return closed
