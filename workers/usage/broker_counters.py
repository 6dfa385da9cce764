"""Reads one RabbitMQ broker's usage counters: per vhost, per queue and per exchange. No Django.

Only the vhosts asked for, in calls that are each bounded: per vhost `GET /vhosts/<vhost>` and,
unless the vhost stayed idle since its last listing (IdleVhosts), its queues and exchanges
(`/queues/<vhost>`, `/exchanges/<vhost>`), PAGE_SIZE objects a page;
for the whole broker only `/nodes` (before and after, to tell a restart during the reading), the
tracked connections (no statistics) and the consumers; READERS calls at once. RabbitMQ 3.10 adds statistics
only to the page asked for (it sorts and pages on the names first:
rabbit_mgmt_util:augment_resources) but lists every object of the path for each page, so a
whole-broker listing adds every object's statistics in one call (at 800 vhosts and 15,000
queues `GET /queues` does not answer within 60 s) and the whole broker in pages
lists it all again for each page (measured in docs/storage.md "Brokered metering").

API for the sampler::

    reading = read_broker(api, memory, vhosts, changed=marks)
                                            # BrokerReading of those vhosts (default: all);
                                            #   `marks` {vhost: when its objects last changed,
                                            #   Unix s} (changed_vhosts); raises BrokerError
                                            #   if unreadable
    v = reading.vhosts.get(space.vhost)     # VhostCounters, or None (vhost not on the broker,
                                            #   or a call of its failed twice)
    v.queues["orders"]                      # ObjectCounters of a queue (queue, subscription
                                            #   "<topic>::<sub>", deadletter): by wire name
    v.exchanges["news"]                     # ObjectCounters of a topic (an exchange)
    v.messages_in, v.bytes_in, v.connections, v.epoch, v.since, ...   # the space row

`memory` (an `EpochMemory`) keeps each node's epoch between readings; give it a shared store
(Django's cache) so that every worker process agrees. The figures (measured on RabbitMQ 3.10.8,
docs/storage.md "Brokered metering"):

ObjectCounters, cumulative for the object's life on this node (`epoch`, `since`):
- queue `messages_in` = message_stats.publish: messages clients published that were routed into
  the queue (through any exchange, a topic's copies included); not dead-lettered arrivals.
- queue `messages_out` = ack + deliver_no_ack + get_no_ack: messages consumers took for good
  (acknowledged, or delivered or fetched pre-acknowledged). Not `deliveries`.
- queue `deliveries` = deliver_get: every delivery and basic.get, redeliveries included, and
  those the AMQP 1.0 plugin prefetched beyond the link credit and returned at detach (measured:
  110 deliveries for 50 accepted): informative, not for billing.
- exchange `messages_in` = publish_in: messages clients published to the exchange;
  `messages_out` = publish_out: the copies it routed into queues (subscriptions and receivers'
  temporary queues, through exchange-to-exchange bindings too).
- gauges (queues): `stored_messages` = messages (ready + unacknowledged), `stored_bytes` =
  message_bytes (the stored message sizes: for an AMQP 1.0 message with only a body, its
  encoded body section), from one row. RabbitMQ writes the counts and the bytes to two
  tables in one emission but its collector copies them apart: while a queue changes, a row
  may pair counts and bytes up to one stats interval apart (seen: 98 messages with 0 bytes);
  once a queue is still for a stats interval they agree (after a drain: both 0). A row that
  has one of the two (a new quorum queue) gives None for both: unknown, not 0.
- `consumers` (queues): a gauge.

VhostCounters (the space row), cumulative since the node started (`epoch`, `since`):
- `messages_in` = publish: every message clients published into the vhost (before routing);
  `messages_out` = ack + deliver_no_ack + get_no_ack over its queues; `deliveries` as above.
- `bytes_in`/`bytes_out` = recv_oct/send_oct: TCP payload octets the broker received from and
  sent to the vhost's clients, summed over its connections as of each connection's last
  statistics emission, closed connections included. Exact against a counting proxy while a
  connection lives, but: RabbitMQ 3.10 reports no octets for AMQP 1.0 connections (only
  AMQP 0-9-1 and MQTT count), and what a connection moved in its last one or two stats
  intervals before it closed is never counted.
- `connections` (clients connected, any protocol) and `consumers`: gauges.

Statistics lag: RabbitMQ emits them every collect_statistics_interval (5 s by default) and its
management agent copies them every 30 s (deploy/local/services.sh): a figure shows an event
0-35 s later.

Epochs: the management statistics live in the node's memory and start again at 0 when the
node restarts, and an object's start again when it is deleted and recreated. The vhost epoch
is the node's (`EpochMemory`); a queue, exchange or vhost that the storage controller created
carries its creation time (`INCARNATION_ARG`, `INCARNATION_TAG_PREFIX`), appended to its epoch.

One module of 570-odd lines, one job (a consistent reading of one broker): the calls, their
paging, the idle vhosts' kept listings and the epoch bookkeeping all serve it (nodes read before
and after, a vhost skipped whole when one of its calls fails, a kept listing given only where
the same reading shows nothing moved); split, each part would need the others' state.
"""
from __future__ import annotations

import logging
import math
import time
import zlib
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import quote

from core.threads import process_pool
from workers.agents.storage.rabbitmq_objects import INCARNATION_ARG, INCARNATION_TAG_PREFIX
from workers.clients.rabbitmq_api import BrokerError, RabbitMQApi
from workers.clients.rabbitmq_api import rows as listed

logger = logging.getLogger(__name__)

QUEUE_COLUMNS = ("vhost,name,arguments,consumers,messages,message_bytes,message_stats.publish,"
                 "message_stats.ack,message_stats.deliver_no_ack,message_stats.get_no_ack,"
                 "message_stats.deliver_get")
EXCHANGE_COLUMNS = "vhost,name,arguments,message_stats.publish_in,message_stats.publish_out"
VHOST_COLUMNS = ("name,tags,recv_oct,send_oct,messages,messages_unacknowledged,"
                 "message_stats.publish,message_stats.ack,message_stats.deliver_no_ack,"
                 "message_stats.get_no_ack,message_stats.deliver_get")
# What tells that a vhost's queues and exchanges changed since they were last listed: any
# message published, taken or delivered, any message stored or gone (expiry included), any
# connection or consumer come or gone, and (read apart: `changed`) any object the storage
# controller made, changed or deleted. Octets are not in it: heartbeats move them.
IDLE_SIGNATURE = ("messages", "messages_unacknowledged")
IDLE_STATS = ("publish", "ack", "deliver_no_ack", "get_no_ack", "deliver_get")
# An idle vhost's objects are listed again once in every such period (seconds), at a point of
# its own in it: what neither the signature nor a mark tells (an object made or deleted by
# hand on the broker, a mark lost with Redis) shows by then. 600 s before the marks and the
# consumers: the relistings were then most of the sampler's load on a fleet (docs/scale.md).
RELIST_EVERY = 3600.0  # below changed_vhosts.KEPT_SECONDS
# A mark this much older than a listing still has it listed again: the storage controller's
# clock and the sampler's are different hosts' on Kubernetes.
MARK_SKEW = 5.0
# Statistics show 0-10 s late (below), the vhost's and its objects' apart: a listing made this
# long after the vhost's signature last changed has caught up with it.
SETTLE_SECONDS = 30.0
NODE_COLUMNS = "name,uptime,os_pid,running"
PAGE_SIZE = 500  # objects per call: RabbitMQ's most
LISTING_PASSES = 3  # passes over a vhost's pages while its objects come and go
OUT_OF_RANGE = "Page out of range"  # RabbitMQ's answer to a page past the end (400)
READERS = 4  # calls at once: enough to keep a 2-core broker busy
RETRY_PAUSE = 0.2  # seconds before a vhost's failed call is made again (_per_vhost)
UNREADABLE = "unreadable"  # a vhost's answer when its call failed twice
# A node's start is read as (now - uptime); RabbitMQ refreshes `uptime` once per copy of its
# statistics (30 s here, docs/storage.md "Lag"), so that estimate saws by up to as much plus the
# request's latency. Well inside this margin it is the same node instance.
SAME_START_TOLERANCE_MS = 120_000
EPOCH_KEY_PREFIX = "maas:usage:broker-epoch:"


@dataclass(frozen=True)
class ObjectCounters:
    """One queue or exchange: cumulative counters, gauges, and the counters' epoch."""

    messages_in: int
    messages_out: int
    deliveries: int
    stored_messages: int | None  # None: an exchange, or not reported yet
    stored_bytes: int | None
    consumers: int
    epoch: str
    since: datetime | None


@dataclass(frozen=True)
class VhostCounters:
    """One vhost (address space): its totals, gauges and objects."""

    messages_in: int
    messages_out: int
    deliveries: int
    bytes_in: int
    bytes_out: int
    connections: int
    consumers: int
    epoch: str
    since: datetime | None
    queues: dict[str, ObjectCounters] = field(default_factory=dict)
    exchanges: dict[str, ObjectCounters] = field(default_factory=dict)


@dataclass(frozen=True)
class BrokerReading:
    """Everything one broker said in one round: per vhost name."""

    read_at: datetime
    epoch: str
    since: datetime | None
    vhosts: dict[str, VhostCounters]


# --- epochs ----------------------------------------------------------------------------


class _DictStore:
    """The default store of an EpochMemory: this process only."""

    def __init__(self) -> None:
        self._data: dict = {}

    def get(self, key):
        return self._data.get(key)

    def set(self, key, value, timeout=None) -> None:
        self._data[key] = value


class EpochMemory:
    """Each node's epoch string, kept from one reading to the next so that it never flips.

    No function of one reading can name a node instance both exactly and stably: the start
    is only known as (now - uptime), which saws by seconds, so any rounding of it has edges
    that a reading can fall on either side of. Here a node keeps the epoch of its previous
    reading while it is plainly the same instance (same os pid, uptime not lower, start within
    `SAME_START_TOLERANCE_MS`); otherwise (a restart) it gets a new one. `store` is anything
    with Django's cache `get(key)` and `set(key, value, timeout)`; give the sampler's workers
    one shared store. Should the store lose the entry, the new string is the same unless the
    node started within seconds before a full hour (the string holds the start's hour)."""

    def __init__(self, store=None) -> None:
        self.store = store if store is not None else _DictStore()

    def node_epoch(self, broker: str, name: str, os_pid: str, uptime_ms: int,
                   read_ms: float) -> tuple[str, datetime]:
        """(epoch, since) of one running node read at `read_ms` (Unix ms, this host's clock)."""
        start_ms = int(read_ms - uptime_ms)
        key = EPOCH_KEY_PREFIX + broker + ":" + name
        prev = self.store.get(key)
        if (prev and prev["os_pid"] == os_pid and uptime_ms >= prev["uptime_ms"]
                and abs(start_ms - prev["start_ms"]) <= SAME_START_TOLERANCE_MS):
            epoch, since_ms = prev["epoch"], prev["since_ms"]
        else:
            epoch, since_ms = _fresh_epoch(name, os_pid, start_ms), start_ms // 1000 * 1000
            if prev and prev["epoch"] == epoch:  # restarted within the hour, same pid
                epoch += f"+{start_ms // 1000}"
        self.store.set(key, {"epoch": epoch, "since_ms": since_ms, "start_ms": start_ms,
                             "uptime_ms": uptime_ms, "os_pid": os_pid}, None)
        return epoch, datetime.fromtimestamp(since_ms / 1000, UTC)


def _fresh_epoch(name: str, os_pid: str, start_ms: int) -> str:
    hour = datetime.fromtimestamp(start_ms / 1000, UTC).strftime("%Y-%m-%dT%HZ")
    return f"{name}/{os_pid}/{hour}"


def incarnation(value) -> int | None:
    """The creation time (Unix ms) MaaS stamped on an object, or None."""
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def _object_epoch(epoch: str, since: datetime | None, created_ms: int | None):
    """An object's counters begin at the later of the node's start and its own creation."""
    if created_ms is None:
        return epoch, since
    created = datetime.fromtimestamp(created_ms / 1000, UTC)
    return f"{epoch}/{created_ms}", max(since, created) if since else created


# --- reading ---------------------------------------------------------------------------


def _executor() -> ThreadPoolExecutor:
    """A small pool of this process (made after a fork, never inherited)."""
    return process_pool("broker-counters", READERS)


def read_broker(api: RabbitMQApi, memory: EpochMemory | None = None,
                vhosts: Iterable[str] | None = None, *, page_size: int = PAGE_SIZE,
                changed: dict[str, float] | None = None) -> BrokerReading:
    """One reading of `vhosts` (default: every vhost of the broker; one not on it is left
    out), per vhost and a page of at most `page_size` objects at a time. A vhost a call of
    which fails transiently twice is left out too; raises BrokerError if a broker-wide call
    fails, a call is refused (4xx), or a node restarted during the reading. `changed` gives
    the vhosts whose objects changed and when (Unix s): an idle one is listed again if that
    was since its last listing."""
    memory = memory or _default_memory
    if vhosts is None:
        vhosts = api.vhost_names()
    vhosts, started = sorted(set(vhosts)), time.time()
    calls = {("connections", ""): (_connections, api), ("consumers", ""): (_consumers, api)}
    calls.update({("vhost", vhost): (_per_vhost, _vhost_row, api, vhost) for vhost in vhosts})
    futures = {key: _executor().submit(*call) for key, call in calls.items()}
    try:
        before = time.time() * 1000
        nodes = _nodes(api)
        read_ms = (before + time.time() * 1000) / 2
        answers = {key: f.result() for key, f in futures.items()}
        signatures = _signatures(answers)
        reused = idle.reusable(api.base_url, signatures, started, changed or {})
        for vhost in vhosts:
            if vhost in reused or answers[("vhost", vhost)] in (None, UNREADABLE):
                continue
            futures[("queues", vhost)] = _executor().submit(
                _per_vhost, _listing, api, "/queues/", vhost, QUEUE_COLUMNS, page_size)
            futures[("exchanges", vhost)] = _executor().submit(
                _per_vhost, _listing, api, "/exchanges/", vhost, EXCHANGE_COLUMNS, page_size)
        answers.update({key: f.result() for key, f in futures.items() if key not in answers})
        if not same_instances(nodes, _nodes(api)):
            raise BrokerError("a node restarted during the reading", transient=True)
    finally:
        for f in futures.values():
            f.cancel()  # after a failure: the calls not started yet are not made
    # A vhost that is gone (404) at any of its calls is not on the broker for this reading, and
    # one a call of which failed twice is left out of it: the sampler gives it a gap.
    gone = {v for (kind, v), rows in answers.items() if rows is None or rows is UNREADABLE}
    idle.remember(api.base_url, {v: sig for v, sig in signatures.items() if v not in gone},
                  answers, reused, started)
    rows: dict[str, list] = {"vhost": [], "queues": [], "exchanges": []}
    for (kind, vhost), answer in answers.items():
        if kind in rows and vhost not in gone:
            rows[kind] += answer
    epoch, since = broker_epoch(api.base_url, nodes, read_ms, memory)
    return BrokerReading(
        read_at=datetime.fromtimestamp(read_ms / 1000, UTC), epoch=epoch, since=since,
        vhosts=vhost_counters(rows["vhost"], rows["queues"], rows["exchanges"],
                              answers[("connections", "")], epoch, since))


def _per_vhost(call, api: RabbitMQApi, vhost: str, *args):
    """One of a vhost's calls, made again once after a transient failure; UNREADABLE if that
    fails too. RabbitMQ 3.10 answers 500 at times to two listings at once (seen in CI:
    `rabbit_mgmt_db_cache:fetch` crashing with `already_started`), and one vhost's trouble
    must not make the whole broker's reading a gap."""
    try:
        return call(api, vhost, *args)
    except BrokerError as exc:
        if not exc.transient:
            raise
    time.sleep(RETRY_PAUSE)
    try:
        return call(api, vhost, *args)
    except BrokerError as exc:
        if not exc.transient:
            raise
        logger.warning("usage.vhost_unreadable", extra={
            "broker": api.base_url, "vhost": vhost, "error": exc.message})
        return UNREADABLE


def _signatures(answers: dict) -> dict[str, tuple]:
    """{vhost: what would change were its objects to change} from the vhost rows read."""
    connections = Counter(row.get("vhost") for row in answers[("connections", "")])
    consumers: dict[str, Counter] = {}
    for row in answers[("consumers", "")]:
        queue = row.get("queue") or {}
        consumers.setdefault(queue.get("vhost"), Counter())[queue.get("name")] += 1
    sigs = {}
    for (kind, vhost), rows in answers.items():
        if kind == "vhost" and rows is not None and rows is not UNREADABLE:
            row, stats = rows[0], _stats(rows[0])
            sigs[vhost] = (tuple(row.get(k) for k in IDLE_SIGNATURE)
                           + tuple(stats.get(k) for k in IDLE_STATS) + (connections[vhost],)
                           + (tuple(sorted(consumers.get(vhost, Counter()).items())),))
    return sigs


class IdleVhosts:
    """The last listing of each vhost's queues and exchanges, kept to be given again while
    the vhost stays idle (the same signature), so that a round costs an idle vhost one cheap
    call instead of two listings: listing a vhost's queues with statistics costs RabbitMQ 3.10
    about 0.3 s of its time, and with 1,000 vhosts back to back the sampler kept the broker
    so busy that it started one new vhost a minute (docs/scale.md).

    A listing is given again only once it is *settled*: made SETTLE_SECONDS or more after its
    signature was first seen. A vhost's counters and its objects' are emitted apart (each every
    stats interval), so a listing made just after a change may lag it. An idle vhost is listed
    again as soon as it is marked changed after its listing (`changed`: the storage controller
    made, changed or deleted its objects), and once every RELIST_EVERY seconds anyway, at its
    own point of the period (`relist_due`). Per process; a node restart changes every
    signature (its counters start again). Times are Unix seconds."""

    def __init__(self) -> None:
        self.first_seen: dict[tuple[str, str], tuple] = {}  # key -> (signature, since)
        # key -> (signature, listed at, queue rows, exchange rows, settled); times Unix s
        self.listed: dict[tuple[str, str], tuple] = {}

    def reusable(self, broker: str, signatures: dict[str, tuple], now: float,
                 changed: dict[str, float] | None = None) -> dict[str, tuple]:
        """{vhost: (queue rows, exchange rows)} of the vhosts whose listing can be given
        again."""
        out, changed = {}, changed or {}
        for vhost, sig in signatures.items():
            kept = self.listed.get((broker, vhost))
            if (kept and kept[0] == sig and kept[4]
                    and changed.get(vhost, -math.inf) < kept[1] - MARK_SKEW
                    and not relist_due(broker, vhost, kept[1], now)):
                out[vhost] = (kept[2], kept[3])
        return out

    def remember(self, broker: str, signatures: dict[str, tuple], answers: dict,
                 reused: dict, now: float) -> None:
        """Records a reading that completed, begun at `now`; puts the rows given again into
        `answers`."""
        for vhost, sig in signatures.items():
            key = (broker, vhost)
            if self.first_seen.get(key, (None,))[0] != sig:
                self.first_seen[key] = (sig, now)
            queues, exchanges = answers.get(("queues", vhost)), answers.get(("exchanges", vhost))
            if vhost in reused:
                answers[("queues", vhost)], answers[("exchanges", vhost)] = reused[vhost]
            elif queues is not None and exchanges is not None:
                settled = now - self.first_seen[key][1] >= SETTLE_SECONDS
                self.listed[key] = (sig, now, queues, exchanges, settled)
            else:
                self.listed.pop(key, None)
        for key in [k for k in self.first_seen if k[0] == broker and k[1] not in signatures]:
            self.first_seen.pop(key, None)  # a vhost deleted, or no longer read here
            self.listed.pop(key, None)


def relist_due(broker: str, vhost: str, listed_at: float, now: float) -> bool:
    """Whether a listing of `vhost` made at `listed_at` has passed the vhost's relisting point,
    which comes once every RELIST_EVERY seconds at a phase of its own (from its name). A
    process lists all of a broker's vhosts in its first round: with one period from then for
    all, every tenth minute's round listed them all again at once and for 30-50 s at 100k kept
    the broker's cores from the API's creates (docs/scale.md, "The sampler's relistings
    spread").
    With a phase each, about a tenth of them fall due in any minute."""
    if RELIST_EVERY <= 0:
        return True
    phase = zlib.crc32(f"{broker} {vhost}".encode()) / 2**32 * RELIST_EVERY
    last_point = math.floor((now - phase) / RELIST_EVERY) * RELIST_EVERY + phase
    return listed_at < last_point


idle = IdleVhosts()


def _nodes(api: RabbitMQApi) -> list[dict]:
    return api.listing("/nodes", params={"columns": NODE_COLUMNS})


def _connections(api: RabbitMQApi) -> list[dict]:
    # RabbitMQ's connection tracking (no statistics): listing the connections with statistics
    # costs the whole broker's, and /vhosts/<vhost>/connections lists them all and filters.
    return api.listing("/connections", params={"columns": "vhost", "disable_stats": "true"})


def _consumers(api: RabbitMQApi) -> list[dict]:
    # The whole broker's consumers by queue: as many rows as clients consume, whatever the
    # number of queues; a consumer attached on a connection that was already there moves no
    # other part of the signature.
    return api.listing("/consumers", params={"columns": "queue.name,queue.vhost"})


def _vhost_row(api: RabbitMQApi, vhost: str) -> list[dict] | None:
    row = api.request("GET", "/vhosts/" + quote(vhost, safe=""),
                      params={"columns": VHOST_COLUMNS}, missing_ok=True)
    return None if row is None else [row]


def _listing(api: RabbitMQApi, kind: str, vhost: str, columns: str,
             page_size: int) -> list[dict] | None:
    """Every row of one vhost's queues or exchanges (`kind` "/queues/" or "/exchanges/"),
    page by page; None if the vhost is gone. Pages are offsets into the listing sorted by name:
    should objects come or go between two pages, a row may be read twice (kept once) or
    skipped, so a pass over which the total changed is read again (up to LISTING_PASSES
    times; then the rows of every pass)."""
    seen: dict[str, dict] = {}
    for _ in range(LISTING_PASSES):
        rows, steady = _pass(api, kind + quote(vhost, safe=""), columns, page_size)
        if rows is None:
            return None
        if steady:
            return rows
        seen.update((r["name"], r) for r in rows)
    return list(seen.values())


def _pass(api: RabbitMQApi, path: str, columns: str,
          page_size: int) -> tuple[list[dict] | None, bool]:
    """One pass over the pages of a listing: (rows, whether its total stayed the same)."""
    rows: list[dict] = []
    totals = set()
    page, pages = 1, 1
    while page <= pages:
        params = {"columns": columns, "page": page, "page_size": page_size}
        try:
            answer = api.request("GET", path, params=params, missing_ok=True)
        except BrokerError as exc:
            if page > 1 and OUT_OF_RANGE in exc.message:  # objects went since page 1
                return rows, False
            raise
        if answer is None:
            return None, False
        rows += listed(answer["items"])
        totals.add(answer["total_count"])
        pages = answer["page_count"]
        page += 1
    return rows, len(totals) <= 1


def same_instances(before: list[dict], after: list[dict]) -> bool:
    """Whether two readings of /nodes show the same running node instances (a node that
    restarted has another os pid, or a lower uptime)."""
    def instances(nodes):
        return {(n["name"], str(n.get("os_pid", ""))): int(n["uptime"]) for n in nodes
                if n.get("running", True) and n.get("uptime") is not None}
    first, then = instances(before), instances(after)
    return first.keys() == then.keys() and all(then[k] >= first[k] for k in first)


def broker_epoch(broker: str, nodes: list[dict], read_ms: float,
                 memory: EpochMemory) -> tuple[str, datetime | None]:
    """The epoch of the broker's counters: its node's (MaaS runs single-node brokers; with
    several, the running nodes' joined, so that a restart of any begins new counters)."""
    running = [n for n in nodes if n.get("running", True) and n.get("uptime") is not None]
    if not running:
        raise BrokerError("no running node reports its uptime", transient=True)
    epochs = [memory.node_epoch(broker, n["name"], str(n.get("os_pid", "")), int(n["uptime"]),
                                read_ms) for n in sorted(running, key=lambda n: n["name"])]
    return "|".join(e for e, _ in epochs), max(s for _, s in epochs)


def vhost_counters(vhosts: list[dict], queues: list[dict], exchanges: list[dict],
                   connections: list[dict], epoch: str,
                   since: datetime | None) -> dict[str, VhostCounters]:
    """The listings of one reading, per vhost (pure: tested without a broker)."""
    per: dict[str, dict] = {}
    for row in vhosts:
        v_epoch, v_since = _object_epoch(epoch, since, _tag_incarnation(row.get("tags")))
        per[row["name"]] = {"row": row, "epoch": v_epoch, "since": v_since,
                            "queues": {}, "exchanges": {}, "connections": 0}
    for row in queues:
        v = per.get(row.get("vhost"))
        if v is not None:
            v["queues"][row["name"]] = _queue(row, v["epoch"], v["since"])
    for row in exchanges:
        v = per.get(row.get("vhost"))
        if v is not None and row.get("name"):  # "" is the default exchange
            v["exchanges"][row["name"]] = _exchange(row, v["epoch"], v["since"])
    for row in connections:
        v = per.get(row.get("vhost"))
        if v is not None:
            v["connections"] += 1
    return {name: _vhost(v) for name, v in per.items()}


def _stats(row: dict) -> dict:
    return row.get("message_stats") or {}


def _taken(stats: dict) -> int:
    return sum(int(stats.get(k) or 0) for k in ("ack", "deliver_no_ack", "get_no_ack"))


def _queue(row: dict, epoch: str, since: datetime | None) -> ObjectCounters:
    stats = _stats(row)
    q_epoch, q_since = _object_epoch(
        epoch, since, incarnation((row.get("arguments") or {}).get(INCARNATION_ARG)))
    complete = row.get("messages") is not None and row.get("message_bytes") is not None
    return ObjectCounters(
        messages_in=int(stats.get("publish") or 0), messages_out=_taken(stats),
        deliveries=int(stats.get("deliver_get") or 0),
        stored_messages=int(row["messages"]) if complete else None,
        stored_bytes=int(row["message_bytes"]) if complete else None,
        consumers=int(row.get("consumers") or 0), epoch=q_epoch, since=q_since)


def _exchange(row: dict, epoch: str, since: datetime | None) -> ObjectCounters:
    stats = _stats(row)
    x_epoch, x_since = _object_epoch(
        epoch, since, incarnation((row.get("arguments") or {}).get(INCARNATION_ARG)))
    return ObjectCounters(
        messages_in=int(stats.get("publish_in") or 0),
        messages_out=int(stats.get("publish_out") or 0), deliveries=0,
        stored_messages=None, stored_bytes=None, consumers=0, epoch=x_epoch, since=x_since)


def _vhost(v: dict) -> VhostCounters:
    row, stats = v["row"], _stats(v["row"])
    return VhostCounters(
        messages_in=int(stats.get("publish") or 0), messages_out=_taken(stats),
        deliveries=int(stats.get("deliver_get") or 0),
        bytes_in=int(row.get("recv_oct") or 0), bytes_out=int(row.get("send_oct") or 0),
        connections=v["connections"],
        consumers=sum(q.consumers for q in v["queues"].values()),
        epoch=v["epoch"], since=v["since"], queues=v["queues"], exchanges=v["exchanges"])


def _tag_incarnation(tags) -> int | None:
    if isinstance(tags, str):
        tags = tags.split(",")
    for tag in tags or []:
        if tag.startswith(INCARNATION_TAG_PREFIX):
            return incarnation(tag[len(INCARNATION_TAG_PREFIX):])
    return None


_default_memory = EpochMemory()
