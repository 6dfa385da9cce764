"""Portal page of a space's client connections: who is connected (read from its router or
broker each time, refreshed every 5 s), each connection's links on demand, and a close with
confirmation for those whose role allows it (admins, owners, staff); the service records the
close in the tenant's audit trail. Which connections show their links is part of the table's
query (`open=<id>`), so the refresh keeps them open without any script of our own."""
import time
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_safe

from core.errors import ServiceError, Unavailable
from tenants.roles import Action, role_allows

from .. import services
from ..readings import PROTOCOLS, VIA
from .base import ctx, page, space_of

FILTERS = ("search", "protocol", "via")
MAX_OPEN = 20  # connections showing their links at once: bounds the query string


def age(opened_at: float | None, now: float) -> str:
    """How long a connection has been open, to the unit that matters: "42 s", "3 h 5 min"."""
    if opened_at is None:
        return "–"
    seconds = max(int(now - opened_at), 0)
    minutes, hours = seconds // 60, seconds // 3600
    if seconds < 60:
        return f"{seconds} s"
    if minutes < 60:
        return f"{minutes} min"
    if hours < 24:
        return f"{hours} h {minutes % 60} min"
    return f"{hours // 24} d {hours % 24} h"


def _matches(c, filters: dict) -> bool:
    term = filters.get("search", "").lower()
    return (filters.get("protocol", c.protocol) == c.protocol
            and filters.get("via", c.via) == c.via
            and (not term or term in c.container_id.lower() or term in c.hostname.lower()
                 or term in c.principal.lower()))


def _table(request, p, s) -> dict:
    """The table's context: the space's connections that match the filters, or why there are
    none to show (its router or broker did not answer)."""
    q = request.GET
    filters = {k: q[k].strip() for k in FILTERS if q.get(k, "").strip()}
    base = f"/portal/t/{s.tenant.slug}/spaces/{s.name}/"
    table = {"base": base, "filters": filters, "rows": [], "total": 0, "unavailable": "",
             "can_close": request.user.is_staff or role_allows(p.role, Action.CLOSE_CONNECTIONS),
             "query": urlencode(filters)}
    try:
        # the links only when a row shows them (reading them costs twice their counts)
        found = services.list_connections(s, links=bool(q.getlist("open")))
    except Unavailable as exc:
        table["unavailable"] = exc.message
        return table
    ids = {c.id for c in found}
    opened = {i for i in q.getlist("open")[:MAX_OPEN] if i in ids}
    now = time.time()

    def query(open_ids) -> str:
        return urlencode({**filters, "open": sorted(open_ids)}, doseq=True)

    table.update(
        total=len(found), query=query(opened),
        rows=[{"c": c, "age": age(c.opened_at, now), "open": c.id in opened,
               "opened": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(c.opened_at))
               if c.opened_at is not None else "",
               "toggle": query(opened ^ {c.id})}
              for c in found if _matches(c, filters)])
    return table


@login_required
@require_safe
def connections(request, tenant, space):
    p = page(request, tenant)
    s = space_of(p, space)
    return render(request, "portal/connections.html", p.context(
        space=s, protocols=PROTOCOLS, vias=VIA, **_table(request, p, s)))


@login_required
@require_safe
def connection_rows(request, tenant, space):
    """The connections table alone (htmx: the 5 s refresh, filtering, opening links)."""
    p = page(request, tenant)
    s = space_of(p, space)
    return render(request, "portal/_connections.html", p.context(
        space=s, **_table(request, p, s)))


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def connection_close(request, tenant, space, connection):
    p = page(request, tenant, Action.CLOSE_CONNECTIONS)
    s = space_of(p, space)
    back = f"/portal/t/{tenant}/spaces/{space}/connections/"
    try:
        if request.method == "POST":
            closed = services.close_connection(ctx=ctx(request), space=s,
                                               connection_id=connection)
            messages.success(request, f"Connection of {closed.container_id or closed.id} "
                                      f"({closed.principal}, {closed.hostname}) closed.")
            return redirect(back)
        c = services.find_connection(s, connection)
    except ServiceError as exc:  # gone meanwhile, or the router did not answer
        messages.error(request, exc.message)
        return redirect(back)
    return render(request, "portal/confirm.html", p.context(
        title=f"Close the connection of {c.container_id or c.id}?",
        body=f"User {c.principal} from {c.hostname} over {c.protocol} ({c.via}), "
             f"{len(c.links)} link(s). The client sees a forced close and may reconnect.",
        back=back))
