"""Reads the routers' and brokers' counters and appends usage samples to the usage store.

Counters stay cumulative as the sources keep them; the Spark job turns them into deltas by the
rules of docs/usage.md. Every reading names its counter instance (`epoch`, `since`), so the job
tells a restarted counter from a lower reading; a source that could not be read gives gaps
(counters null), never zeros. Standard spaces: messages and bytes from the router per address
and phase (a queue's phase 1, what its receivers get, is its own series: source `...#out`),
stored messages and bytes and the topics' messages from RabbitMQ. Brokered spaces: everything
from RabbitMQ (workers.usage.broker_counters).
"""
import logging
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NamedTuple

from django.conf import settings
from django.db import connection

from config_service.models import Address, AddressSpace, RouterIncarnation
from workers import endpoints
from workers.agents.router import desired as rc
from workers.agents.router import watch as router_watch
from workers.agents.storage import changed_vhosts, rabbitmq
from workers.clients.qdr import (
    Management,
    ManagementError,
    RouterUnreachable,
    router_address,
    tenant_of,
)
from workers.usage import broker_counters

logger = logging.getLogger(__name__)

ROUTER_ADDRESS = "org.apache.qpid.dispatch.router.address"
CONNECTION = "org.apache.qpid.dispatch.connection"
ADDRESS_ATTRIBUTES = ["key", "address", "phase", "deliveriesIngress", "deliveriesEgress", "bytesIngress",
                      "bytesEgress", "countersEpoch", "countersSince"]
COUNTERS = ("messages_in", "messages_out", "bytes_in", "bytes_out")
MEASURES = (*COUNTERS, "stored_messages", "stored_bytes", "connections", "senders", "receivers")
WAYPOINTS = ("queue", "deadletter", "subscription")  # phase 0 in, phase 1 out (router_config)
# Seconds to wait for each answer of a router: qdrouterd makes every row of a QUERY a separate
# action of its core thread, queued behind the agents' requests (management_agent.c), and
# under a 100,000-address fill pages of 2,000 rows waited more than the agents' 10 s: the
# round's reading of the router was a gap in the usage.
ROUTER_ANSWER_SECONDS = 30.0
NO_COUNTER = "none"  # the epoch of a reading of a counter the source does not have (yet)


@dataclass
class RouterReading:
    """One router's counters: {(vhost, address, phase): counter}, connection gauges per vhost,
    and the run the counters belong to where the router does not name each counter's own."""

    counters: dict = field(default_factory=dict)
    gauges: dict = field(default_factory=dict)
    epoch: str = ""
    since: datetime | None = None


def _row(now, source, space, address, kind, epoch="", since=None, **values) -> dict:
    row = {"sample_id": uuid.uuid4().hex, "ts": now, "tenant": space.tenant.slug,
           "space": space.name, "address": address, "source": source, "kind": kind,
           "epoch": epoch, "since": since}
    for key in MEASURES:
        row[key] = int(values.get(key) or 0)
    return row


def _gap(now, source, space, address, kind) -> dict:
    """No reading: the source could not be read (or its run not be verified) at `now`."""
    return {**_row(now, source, space, address, kind), **dict.fromkeys(MEASURES)}


def read_router(router: endpoints.RouterEndpoint) -> RouterReading | None:
    """The router's counters, or None when they cannot be trusted this round: unreachable, or a
    router without per-counter epochs whose run (router_watch) is not the one recorded."""
    url = router.management_url
    run = None
    mgmt = Management(url, router.admin_user, router.admin_password,
                      timeout=ROUTER_ANSWER_SECONDS, ca=router.management_ca)
    try:
        has = mgmt.schema().get(ROUTER_ADDRESS, frozenset())
        addresses = mgmt.query(ROUTER_ADDRESS, address_attributes(has))
        if "countersEpoch" not in has:
            run = _run(mgmt, url)
            if run is None:
                return None
        connections = mgmt.query(CONNECTION, ["role", "opened", "tenant", "host", "senders",
                                              "receivers"])
    except ManagementError:
        logger.warning("usage.router_unreadable", extra={"router": router_watch.public_url(url)},
                       exc_info=True)
        return None
    finally:
        mgmt.close()
    reading = RouterReading()
    if run is not None:
        reading.epoch, reading.since = run
    for row in addresses:
        qualified, phase = router_address(row)
        vhost, _, address = qualified.partition("/")
        if not address:
            continue
        since = row.get("countersSince")
        reading.counters[(vhost, address, phase)] = {
            "messages_in": row.get("deliveriesIngress", 0),
            "messages_out": row.get("deliveriesEgress", 0),
            # Bytes: the embedded router's encoded message bytes; qdrouterd 1.19 has none.
            "bytes_in": row.get("bytesIngress", 0), "bytes_out": row.get("bytesEgress", 0),
            "epoch": row.get("countersEpoch") or reading.epoch,
            "since": datetime.fromtimestamp(since, UTC) if since else reading.since,
        }
    gauges: dict = defaultdict(lambda: defaultdict(int))
    for row in connections:
        if row.get("role") == "normal" and row.get("opened") and tenant_of(row):
            g = gauges[tenant_of(row)]
            g["connections"] += 1
            g["senders"] += row.get("senders", 0)
            g["receivers"] += row.get("receivers", 0)
    reading.gauges = gauges
    return reading


def address_attributes(has: frozenset) -> list[str]:
    """The counters' attributes the router has (all if it does not say): a round reads every
    address of the router, and at 100,000 addresses on qdrouterd, which has neither the
    address and phase (only the key) nor bytes nor epochs, asking for the seven it lacks made
    each row three times the nodes to encode and decode."""
    if not has:
        return ADDRESS_ATTRIBUTES
    wanted = [a for a in ADDRESS_ATTRIBUTES if a in has]
    if "address" in has and "phase" in has:  # router_address takes these over the key
        wanted = [a for a in wanted if a != "key"]
    return wanted


def _run(mgmt: Management, url: str) -> tuple[str, datetime] | None:
    """(epoch, since) of the router's current run, from the watch's record: a router without
    per-counter epochs (qdrouterd) restarts all its counters at zero with its process.

    The watch's marker on the router is read in the same session as the counters: a router
    that restarted since the watch recorded its run carries no marker (or another token), and
    its counters are then no reading until the watch has recorded the new run."""
    router_watch.detect(url)  # records the run now rather than at the watch's next tick
    seen = RouterIncarnation.objects.filter(management_url=router_watch.public_url(url)).first()
    marker = mgmt.read(rc.ADDRESS, router_watch.MARKER)
    token = str(marker.get("prefix") or "").removeprefix(router_watch.MARKER_PREFIX) if marker else None
    if seen is None or token != seen.token:
        logger.info("usage.router_run_unknown", extra={"router": router_watch.public_url(url)})
        return None
    return f"run:{seen.token}", seen.started_at


def collect(now: datetime | None = None) -> list[dict]:
    """One sample per address (and phase) and per space, for every space that is not
    terminating; each router and broker is read once, whatever number of spaces it serves."""
    now = now or datetime.now(UTC)
    spaces = list(AddressSpace.objects.filter(terminating=False).select_related("tenant"))
    where = {s.pk: endpoints.of(s) for s in spaces}
    routers: dict = {}
    if settings.MAAS_ROUTER_ENABLED:
        for router in {r for w in where.values() for r in w.routers}:
            try:
                routers[router] = read_router(router)
            except RouterUnreachable:
                logger.warning("usage.router_unreachable",
                               extra={"router": router_watch.public_url(router.management_url)})
                routers[router] = None
    # Each call reads one page of one vhost, in well under a second even with thousands of
    # queues; the timeout is for a broker that stopped answering. A slow answer is still
    # worth waiting for (a reading that never completes is a gap): most of the interval.
    timeout = max(10.0, 0.8 * settings.MAAS_USAGE_SAMPLE_INTERVAL)
    vhosts: dict = defaultdict(set)
    for space in spaces:
        for broker in where[space.pk].brokers:
            vhosts[broker].add(space.vhost)
    brokers: dict = {}
    for broker, wanted in vhosts.items():
        api = rabbitmq.RabbitMQApi(broker.api_url, broker.api_user, broker.api_password,
                                   timeout=timeout, ca=broker.broker_ca or None)
        try:
            brokers[broker] = broker_counters.read_broker(
                api, _epochs(), wanted, changed=changed_vhosts.marks(api.base_url, wanted))
        except rabbitmq.BrokerError:
            logger.warning("usage.broker_unreachable", extra={"broker": broker.api_url},
                           exc_info=True)
            brokers[broker] = None
        finally:
            api.close()
    addresses = scheduled_addresses(spaces)
    rows: list[dict] = []
    for space in spaces:
        w = where[space.pk]
        mine = addresses.get(space.pk, [])
        if space.type == "standard" and settings.MAAS_ROUTER_ENABLED:
            # Each router of a mesh is a source of its own: its counters count the messages
            # its own clients sent and received, and restart with it alone.
            for r in w.routers:
                rows += _router_rows(now, space, mine, routers.get(r),
                                     f"router:{router_watch.public_url(r.management_url)}")
        for i, (broker, placed) in enumerate(_by_broker(space, w, mine)):
            # A space's other brokers are sources of their own (a queue's partitions)
            source = f"broker:{space.vhost}" + (f"@{w.placed[i][0]}" if i else "")
            rows += _broker_rows(now, space, placed, brokers.get(broker), source)
    return rows


def _by_broker(space, where: endpoints.SpaceEndpoints, addresses: list) -> list:
    """Each broker of the space with its addresses: a space with several brokers (Kubernetes)
    reads its addresses' placements, the rest (nearly all) need none."""
    if len(where.brokers) == 1:
        return [(where.broker, addresses)]
    placements = dict(Address.objects.filter(space_id=space.pk, scheduled=True)
                      .values_list("address", "placement"))
    return where.partition(addresses, lambda a: placements.get(a.address))


class ScheduledAddress(NamedTuple):
    """What a sample round needs of an address. A tuple, not a model instance: a round reads
    every scheduled address of the platform (100,000 a minute at scale), and building Django
    models was a third of the round's CPU."""

    space_id: int
    address: str
    type: str
    topic: str

    broker_object_name = property(Address.broker_object_name.fget)  # the model's own rule


def scheduled_addresses(spaces) -> dict:
    """{space pk: [ScheduledAddress]} of the scheduled addresses, in one query."""
    found: dict = defaultdict(list)
    rows = Address.objects.filter(space__in=spaces, scheduled=True).values_list(
        *ScheduledAddress._fields)
    for row in rows:
        a = ScheduledAddress._make(row)
        found[a.space_id].append(a)
    return found


def _router_rows(now, space, addresses, reading: RouterReading | None, source: str) -> list:
    """A standard space's router readings: per address and phase, and the space's gauges."""
    if reading is None:
        return ([_gap(now, source, space, a.address, "address") for a in addresses
                 if a.type != "topic"] + [_gap(now, source, space, "", "space")])
    rows = []
    vhost = space.vhost
    for a in addresses:
        if a.type == "topic":
            continue  # link-routed to its exchange: the router counts no address; RabbitMQ does
        wire = a.broker_object_name
        if a.type in WAYPOINTS:
            # Phase 0 is what clients send (to the broker), phase 1 what the broker sends them.
            sent = _counter(reading, vhost, wire, 0)
            got = _counter(reading, vhost, wire, 1)
            rows.append(_row(now, source, space, a.address, "address", sent["epoch"],
                             sent["since"], messages_in=sent["messages_in"],
                             bytes_in=sent["bytes_in"]))
            rows.append(_row(now, f"{source}#out", space, a.address, "address", got["epoch"],
                             got["since"], messages_out=got["messages_out"],
                             bytes_out=got["bytes_out"]))
        else:
            c = _counter(reading, vhost, wire, 0)
            rows.append(_row(now, source, space, a.address, "address", c["epoch"], c["since"],
                             **{k: c[k] for k in COUNTERS}))
    rows.append(_row(now, source, space, "", "space", reading.epoch, reading.since,
                     **reading.gauges.get(vhost, {})))
    return rows


def _counter(reading: RouterReading, vhost: str, address: str, phase: int) -> dict:
    # No counter on a router that was read: nothing was ever counted for it there (the
    # embedded router keeps every counter of a configured address; qdrouterd keeps anycast and
    # multicast ones by a usage hold, a queue's by its autoLinks). A zero reading of no counter
    # instance: the first reading of a real one then bills all of it, a new epoch.
    return reading.counters.get((vhost, address, phase)) or {
        **dict.fromkeys(COUNTERS, 0), "epoch": NO_COUNTER, "since": None}


class _SharedStore:
    """Django's cache (Redis), shared by every worker process, so that a broker node keeps one
    epoch whichever process reads it; this process's memory while the cache is unreachable
    (an epoch then stays the same unless the node started within seconds before an hour)."""

    def __init__(self):
        self.local: dict = {}

    def get(self, key):
        from django.core.cache import cache

        try:
            return cache.get(key)
        except Exception:
            logger.warning("usage.epoch_store_unreachable", exc_info=True)
            return self.local.get(key)

    def set(self, key, value, timeout=None) -> None:
        from django.core.cache import cache

        self.local[key] = value
        try:
            cache.set(key, value, timeout)
        except Exception:
            logger.warning("usage.epoch_store_unreachable", exc_info=True)


_EPOCHS = broker_counters.EpochMemory(_SharedStore())


def _epochs() -> broker_counters.EpochMemory:
    return _EPOCHS


def _broker_rows(now, space, addresses, reading, source: str) -> list:
    """A space's RabbitMQ readings: per address its queue's or topic exchange's counters (in a
    standard space the router counts what goes through queues, so only their stored gauges
    come from here), and a brokered space's own row (connection octets, gauges)."""
    brokered = space.type != "standard"
    v = reading.vhosts.get(space.vhost) if reading is not None else None
    if v is None:
        # Unreadable, or the vhost is not there (yet): nothing true to say.
        return ([_gap(now, source, space, a.address, "address") for a in addresses]
                + ([_gap(now, source, space, "", "space")] if brokered else []))
    rows = []
    for a in addresses:
        wire = a.broker_object_name
        if a.type == "topic":
            x = v.exchanges.get(wire)
            if x is not None:
                rows.append(_row(now, source, space, a.address, "address", x.epoch, x.since,
                                 messages_in=x.messages_in, messages_out=x.messages_out))
            continue
        q = v.queues.get(wire)
        if q is None:
            continue  # not created on the broker yet: nothing was stored or counted there
        stored = {"stored_messages": q.stored_messages, "stored_bytes": q.stored_bytes}
        if not brokered:
            rows.append(_row(now, source, space, a.address, "address", q.epoch, q.since,
                             **stored))
            continue
        # A subscription's arrivals are its topic's messages_out already: not counted again.
        arrived = 0 if a.type == "subscription" else q.messages_in
        rows.append(_row(now, source, space, a.address, "address", q.epoch, q.since,
                         messages_in=arrived, messages_out=q.messages_out, **stored))
    if brokered:
        rows.append(_row(now, source, space, "", "space", v.epoch, v.since,
                         bytes_in=v.bytes_in, bytes_out=v.bytes_out,
                         connections=v.connections, receivers=v.consumers))
    return rows


# One round at a time on the platform (a PostgreSQL advisory lock, let go if its process dies).
_ONE_ROUND_LOCK = int.from_bytes(b"maas:usr", "big", signed=True)


def sample(now: datetime | None = None) -> int:
    """Collects and appends one round of samples to the usage store; returns how many, or -1
    doing nothing while another round runs: one longer than the interval (100,000 addresses
    on qdrouterd during a fill: 83-128 s) took the background worker's second process too, and
    the resync ticks and the router tables' reads queued behind them expired unrun."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [_ONE_ROUND_LOCK])
        if not cursor.fetchone()[0]:
            logger.info("usage.sample_skipped", extra={"reason": "a round still runs"})
            return -1
    try:
        return _sample(now)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [_ONE_ROUND_LOCK])


def _sample(now: datetime | None) -> int:
    from spark.samples import write_samples

    now = now or datetime.now(UTC)
    rows = collect(now)
    if rows:
        write_samples(rows, settings.MAAS_USAGE_STORE, now)
    logger.info("usage.sampled", extra={"n_samples": len(rows)})
    return len(rows)
