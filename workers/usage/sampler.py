"""Reads the routers' and brokers' counters and appends usage samples to the usage store.

Counters stay cumulative as the sources keep them (a restarted router starts again at zero);
the Spark job turns them into deltas. Standard spaces: messages and bytes from the router
(per address, both phases of a queue), stored messages and bytes from RabbitMQ. Brokered
spaces: everything from RabbitMQ (which counts messages, not bytes).
"""
import logging
import uuid
from collections import defaultdict
from datetime import UTC, datetime

from django.conf import settings

from config_service.models import Address, AddressSpace

from .. import endpoints
from ..agents.qdr import Management, RouterUnreachable, router_address, tenant_of
from ..storage import rabbitmq

logger = logging.getLogger(__name__)

ROUTER_ADDRESS = "org.apache.qpid.dispatch.router.address"
CONNECTION = "org.apache.qpid.dispatch.connection"
QUEUE_COLUMNS = "vhost,name,messages,message_bytes,consumers,message_stats.publish,message_stats.deliver_get"


def _row(now, source, space, address, kind, **values) -> dict:
    row = {"sample_id": uuid.uuid4().hex, "ts": now, "tenant": space.tenant.slug,
           "space": space.name, "address": address, "source": source, "kind": kind}
    for key in ("messages_in", "messages_out", "bytes_in", "bytes_out", "stored_messages",
                "stored_bytes", "connections", "senders", "receivers"):
        row[key] = int(values.get(key) or 0)
    return row


def router_counters(router: endpoints.RouterEndpoint) -> tuple[dict, dict]:
    """({(vhost, address): counters}, {vhost: connection gauges}) from a router, one query."""
    mgmt = Management(router.management_url, router.admin_user, router.admin_password)
    try:
        addresses, connections = mgmt.query(ROUTER_ADDRESS), mgmt.query(CONNECTION)
    finally:
        mgmt.close()
    per_address: dict = defaultdict(lambda: defaultdict(int))
    for row in addresses:
        qualified, phase = router_address(row)
        vhost, _, address = qualified.partition("/")
        if not address:
            continue
        c = per_address[(vhost, address)]
        # Phase 0 is what clients send; phase 1 (a queue's consumers side) what they receive.
        # Bytes: the embedded router's counters; qdrouterd 1.19 counts deliveries only.
        if phase == 0:
            c["messages_in"] += row.get("deliveriesIngress", 0)
            c["bytes_in"] += row.get("bytesIngress", 0)
        if phase == 1 or not row.get("containerCount"):
            c["messages_out"] += row.get("deliveriesEgress", 0)
            c["bytes_out"] += row.get("bytesEgress", 0)
    gauges: dict = defaultdict(lambda: defaultdict(int))
    for row in connections:
        if row.get("role") == "normal" and row.get("opened") and tenant_of(row):
            g = gauges[tenant_of(row)]
            g["connections"] += 1
            g["senders"] += row.get("senders", 0)
            g["receivers"] += row.get("receivers", 0)
    return per_address, gauges


def broker_queues(api: rabbitmq.RabbitMQApi) -> dict[str, dict[str, dict]]:
    """{vhost: {queue name: counters}} for the whole broker in one call, not one per space."""
    per_vhost: dict = defaultdict(dict)
    for row in api.request("GET", "/queues", params={"columns": QUEUE_COLUMNS}) or []:
        per_vhost[row.get("vhost")][row.get("name")] = row
    return per_vhost


def broker_connections(api: rabbitmq.RabbitMQApi) -> dict:
    counts: dict = defaultdict(int)
    for row in api.request("GET", "/connections", params={"columns": "vhost"}) or []:
        counts[row.get("vhost")] += 1
    return counts


def collect(now: datetime | None = None) -> list[dict]:
    """One sample per address and per space, for every space that is not terminating; each
    router and broker is read once, whatever number of spaces it serves (`endpoints.of`)."""
    now = now or datetime.now(UTC)
    spaces = list(AddressSpace.objects.filter(terminating=False).select_related("tenant"))
    where = {s.pk: endpoints.of(s) for s in spaces}
    routers: dict = {}
    if settings.MAAS_ROUTER_ENABLED:
        for router in {w.router for w in where.values() if w.router is not None}:
            try:
                routers[router] = router_counters(router)
            except RouterUnreachable:  # no rows rather than zeros: zeros would read as a reset
                logger.warning("usage.router_unreachable",
                               extra={"router": router.management_url}, exc_info=True)
    # One listing of every queue with its counters takes seconds on a busy broker with
    # thousands of queues: allow most of the interval (this runs in its own worker).
    timeout = max(10.0, 0.8 * settings.MAAS_USAGE_SAMPLE_INTERVAL)
    brokers: dict = {}
    for broker in {w.broker for w in where.values()}:
        api = rabbitmq.RabbitMQApi(broker.api_url, broker.api_user, broker.api_password,
                                   timeout=timeout)
        try:
            brokers[broker] = broker_connections(api), broker_queues(api)
        except rabbitmq.BrokerError:
            logger.warning("usage.broker_unreachable", extra={"broker": broker.api_url},
                           exc_info=True)
        finally:
            api.close()
    names = wire_names(spaces)
    rows: list[dict] = []
    for space in spaces:
        w = where[space.pk]
        reads_router = w.router is not None and settings.MAAS_ROUTER_ENABLED
        router = routers.get(w.router) if reads_router else ({}, {})
        broker = brokers.get(w.broker)
        if router is None or broker is None:
            continue  # a source could not be read: this round has nothing true to say
        source = f"router:{w.router.management_url}" if reads_router else ""
        rows += _space_rows(now, space, names.get(space.pk, {}), broker[1].get(space.vhost, {}),
                            *router, broker[0], source)
    return rows


def wire_names(spaces) -> dict:
    """{space pk: {wire name: address}} of the scheduled addresses, in one query."""
    names: dict = defaultdict(dict)
    addresses = Address.objects.filter(space__in=spaces, scheduled=True)
    for a in addresses.only("space_id", "address", "type", "topic"):
        names[a.space_id][a.broker_object_name] = a.address
    return names


def _space_rows(now, space, names, queues, router, gauges, broker_conns,
                router_source) -> list[dict]:
    rows = []
    broker_source = f"broker:{space.vhost}"
    for wire, address in names.items():
        q = queues.get(wire, {})
        stats = q.get("message_stats") or {}
        stored = {"stored_messages": q.get("messages"), "stored_bytes": q.get("message_bytes")}
        if space.type == "standard":
            counters = router.get((space.vhost, wire), {})
            rows.append(_row(now, router_source, space, address, "address", **counters))
            if q:
                rows.append(_row(now, broker_source, space, address, "address", **stored))
        else:
            rows.append(_row(now, broker_source, space, address, "address",
                             messages_in=stats.get("publish"),
                             messages_out=stats.get("deliver_get"), **stored))
    if space.type == "standard":
        g = gauges.get(space.vhost, {})
        rows.append(_row(now, router_source, space, "", "space", **g))
    else:
        consumers = sum(int(q.get("consumers") or 0) for q in queues.values())
        rows.append(_row(now, broker_source, space, "", "space",
                         connections=broker_conns.get(space.vhost, 0), receivers=consumers))
    return rows


def sample(now: datetime | None = None) -> int:
    """Collects and appends one round of samples to the usage store; returns how many."""
    from spark.samples import write_samples

    now = now or datetime.now(UTC)
    rows = collect(now)
    if rows:
        write_samples(rows, settings.MAAS_USAGE_STORE, now)
    logger.info("usage.sampled", extra={"n_samples": len(rows)})
    return len(rows)
