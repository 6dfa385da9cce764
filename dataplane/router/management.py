"""The `$management` node: qdrouterd's AMQP management protocol over the entity store.

Requests carry `operation`, `type`/`entityType` and `name`/`identity` in application
properties; replies go pre-settled to `reply_to` with `correlation_id` echoed and the status in
`statusCode`/`statusDescription`, exactly as the router agent expects from qdrouterd. With a
configuration journal every change is in it, and synced, before its reply is written.
"""

import logging
import time

from cproton_ffi import lib as L
from proton import Message

from . import entities as E
from . import views
from .config_journal import ConfigJournal

logger = logging.getLogger(__name__)

_STATUS_TEXT = {200: "OK", 201: "Created", 204: "No Content"}
CONFIG_OPERATIONS = ("CREATE", "READ", "UPDATE", "DELETE", "QUERY")


class Management:
    def __init__(self, engine):
        self.engine = engine
        self.hooks = {
            E.CONNECTOR: (engine.broker.connector_created, engine.broker.connector_deleted),
            E.AUTO_LINK: (engine.broker.autolink_created, engine.broker.autolink_deleted),
            # an address's usage counters go with its configuration (once it has no node)
            E.ADDRESS: (_nothing, engine.ledger.config_deleted),
        }
        # {(type, namePrefix): rows} of a paged QUERY under way, until its last page
        self._pages: dict[tuple, list] = {}
        self.journal: ConfigJournal | None = None

    def open_journal(self, directory: str) -> int:
        """Restores the configuration the journal in `directory` holds (before any listener
        opens), then journals every change; the number of entities restored."""
        journal = ConfigJournal(directory)
        began = time.monotonic()
        found = journal.load()
        store, created = self.engine.store, []
        try:
            for etype, name, attrs in found:
                created.append(store.create(etype, name, attrs))
        except E.EntityError as exc:  # e.g. a setting this version no longer takes
            for entity in created:
                store.delete(entity)
            journal.set_aside(f"{exc.description} ({etype} {name})")
            created = []
        for entity in created:  # connectors connect, autoLinks attach: once all are there
            hook = self.hooks.get(entity["type"])
            if hook:
                hook[0](entity)
        if journal.whole and not journal.due(len(created)):
            journal.reopen()
        else:  # none, set aside, or grown well past its entities
            journal.rewrite(created)
        self.journal = journal
        logger.info("config_journal.restored", extra={
            "entities": len(created), "seconds": round(time.monotonic() - began, 3)})
        return len(created)

    def sync(self) -> None:
        """Called before output to a management connection is written: the changes its
        replies confirm reach the disk first; a journal grown well past its entities is
        rewritten."""
        journal = self.journal
        if journal is None:
            return
        journal.sync()
        store = self.engine.store
        if journal.due(sum(store.count(t) for t in store.types())):
            journal.rewrite(sorted((e for t in store.types() for e in store.all(t)),
                                   key=lambda e: int(e["identity"])))

    def on_request(self, ls, delivery, data: bytes) -> None:
        request = Message()
        try:
            request.decode(data)
            status, description, body = self.handle(request.properties or {}, request.body)
        except Exception as exc:  # a malformed request must not kill the router
            logger.exception("management.request_failed")
            status, description, body = 400, f"Bad request: {exc}", None
        if not L.pn_delivery_settled(delivery):
            L.pn_delivery_update(delivery, L.PN_ACCEPTED)
        L.pn_delivery_settle(delivery)
        if L.pn_link_credit(ls.pn) < 50:
            L.pn_link_flow(ls.pn, 100 - L.pn_link_credit(ls.pn))
        if request.reply_to:
            reply = Message(body=body, correlation_id=request.correlation_id,
                            properties={"statusCode": status, "statusDescription": description},
                            address=request.reply_to)
            conn = ls.conn
            key = f"{conn.vhost}/{request.reply_to}" if conn.vhost else request.reply_to
            node = self.engine.fwd.nodes.get((key, 0))
            if node is not None:
                self.engine.fwd.inject(node, reply.encode())

    def handle(self, props: dict, body):
        op = props.get("operation")
        etype = self._full_type(props.get("type") or props.get("entityType"))
        if str(op).startswith("GET-"):
            # the GET-* operations name the management node's own type (org.amqp.management)
            # in `type`; the type they ask about is `entityType`
            etype = self._full_type(props.get("entityType"))
        name = props.get("name")
        identity = props.get("identity")
        store = self.engine.store
        try:
            if op == "QUERY":
                return self._query(self._full_type(props.get("entityType")) or etype, body, props)
            if op == "GET-MGMT-NODES":
                return 200, "OK", []
            if op == "GET-TYPES":
                return 200, "OK", {t: [] for t in list(store.types()) + list(views.TYPES)}
            if op == "GET-ATTRIBUTES":  # as qdrouterd: {type: [attribute names]}
                found = {t: ["name", "identity", *E.SCHEMAS[t].defaults]
                         for t in store.types() if t in E.SCHEMAS}
                found.update(views.attribute_names(self.engine))
                return 200, "OK", {t: names for t, names in found.items()
                                   if not etype or t == etype}
            if op == "GET-OPERATIONS":  # as qdrouterd: {type: [operations]}
                found = {t: list(CONFIG_OPERATIONS) for t in store.types()}
                found.update({t: ["READ", "QUERY"] for t in views.TYPES})
                found[views.CONNECTION] = ["READ", "QUERY", "UPDATE"]
                return 200, "OK", {t: ops for t, ops in found.items() if not etype or t == etype}
            if op == "GET-SCHEMA":  # the shape of qdrouterd's, with names and operations only
                attributes = {t: ["name", "identity", *E.SCHEMAS[t].defaults]
                              for t in store.types() if t in E.SCHEMAS}
                attributes.update(views.attribute_names(self.engine))
                return 200, "OK", {"entityTypes": {
                    t: {"attributes": {a: {} for a in names},
                        "operations": ["READ", "QUERY"] if t in views.TYPES
                        else list(CONFIG_OPERATIONS)}
                    for t, names in attributes.items()}}
            if op == "GET-ANNOTATIONS":
                return 200, "OK", {t: [] for t in [*store.types(), *views.TYPES]
                                   if not etype or t == etype}
            if op in ("CREATE", "READ", "UPDATE", "DELETE") and not etype:
                return 400, "Missing type", None
            if op == "CREATE":
                attrs = dict(body or {})
                attrs.pop("type", None)
                if name is None:
                    name = attrs.get("name")
                attrs.pop("name", None)
                ent = store.create(etype, name, attrs)
                hook = self.hooks.get(etype)
                if hook:
                    hook[0](ent)
                if self.journal is not None:
                    self.journal.created(ent)
                logger.info("management.created", extra={"type": etype, "entity": ent["name"]})
                return 201, "Created", store.public(ent)
            if op == "READ":
                if etype in views.TYPES:
                    rows = views.rows(self.engine, etype)
                    if etype == views.ROUTER and (identity == "self" or name == "self"):
                        return 200, "OK", rows[0]  # qdmanage read --type=router (qdstat -g)
                    for row in rows:
                        if row.get("name") == name or row.get("identity") == identity:
                            return 200, "OK", row
                    return 404, "Entity not found", None
                return 200, "OK", store.public(store.find(etype, name, identity))
            if op == "UPDATE" and etype == views.CONNECTION:
                return self._update_connection(name, identity, body or {})
            if op == "UPDATE":
                ent = store.find(etype, name, identity)
                store.update(ent, dict(body or {}))
                if self.journal is not None:
                    self.journal.updated(ent)
                return 200, "OK", store.public(ent)
            if op == "DELETE":
                ent = store.find(etype, name, identity)
                store.delete(ent)
                if self.journal is not None:
                    self.journal.deleted(ent)
                hook = self.hooks.get(etype)
                if hook:
                    hook[1](ent)
                logger.info("management.deleted", extra={"type": etype, "entity": ent["name"]})
                return 204, "No Content", None
        except E.EntityError as exc:
            return exc.status, exc.description, None
        return 400, f"Unsupported operation {op}", None

    def _update_connection(self, name, identity, body: dict):
        """qdrouterd's one change to a connection: `adminStatus: deleted` closes it (with
        amqp:connection:forced). The router's own connections (to brokers) are not closed."""
        unknown = set(body) - {"adminStatus", "enableProtocolTrace", "type", "name", "identity"}
        if unknown:
            return 400, f"Attributes not updatable on a connection: {sorted(unknown)}", None
        conn = next((c for c in self.engine.loop.conns.values()
                     if str(c.identity) == str(identity) or f"connection/{c.host}" == name),
                    None)
        if conn is None or conn.closed:
            return 404, "Entity not found", None
        if body.get("adminStatus") == "deleted":
            if conn.kind != "client":
                return 403, "Only client connections can be closed", None
            self.engine.force_close(conn, "Connection closed by management")
        elif body.get("adminStatus") not in (None, "enabled"):
            return 400, "adminStatus must be enabled or deleted", None
        row = next((r for r in views.connection_rows(self.engine)
                    if r["identity"] == str(conn.identity)), None)
        return 200, "OK", row

    def _full_type(self, etype):
        """qdrouterd takes short type names too (`router`, `address`, `autoLink`)."""
        if not etype or "." in str(etype):
            return etype
        known = [*self.engine.store.types(), *views.TYPES]
        for candidate in (E.PREFIX + etype, f"{E.PREFIX}router.config.{etype}"):
            if candidate in known:
                return candidate
        return etype

    def _query(self, etype, body, props: dict):
        """qdrouterd's QUERY with its paging (`count`, `offset`), plus two MaaS extensions
        qdrouterd ignores: `namePrefix`, only the entities so named, from the store's owner
        index; `vhost`, only that vhost's clients' connections and links. A paged read is
        served from the rows its first page saw, so it costs one pass over the table, not one
        per page."""
        body = body or {}
        names = list(body.get("attributeNames") or [])
        prefix = str(props.get("namePrefix") or "")
        vhost = props.get("vhost")
        vhost = str(vhost) if vhost is not None else None
        count, offset = _int(props.get("count"), -1), max(_int(props.get("offset"), 0), 0)
        key = (etype, prefix, vhost)
        rows = self._pages.get(key) if offset else None
        if rows is None:
            if etype in views.TYPES:
                rows = [r for r in views.rows(self.engine, etype, vhost)
                        if str(r.get("name", "")).startswith(prefix)]
            elif etype in self.engine.store.types():
                rows = [self.engine.store.public(e)
                        for e in self.engine.store.owned(etype, prefix)]
            else:
                return 404, f"Unknown entity type: {etype}", None
            if count >= 0:
                self._pages[key] = rows
        if count >= 0:
            rows = rows[offset:offset + count]
            if len(rows) < count:
                self._pages.pop(key, None)  # the last page
        if not names:
            for row in rows:
                names.extend(k for k in row if k not in names)
        return 200, "OK", {"attributeNames": names,
                           "results": [[row.get(n) for n in names] for row in rows]}


def _nothing(entity: dict) -> None:
    return None


def _int(value, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
