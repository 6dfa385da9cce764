"""A shared router's tables, read whole by one process and kept in Redis for the full diffs of
every space of every worker process.

qdrouterd has no `namePrefix`: a QUERY answers every space's entities, so each full diff (every
drift check, every new space) of one space read the whole router: 10,307 rows and 784 ms at
5,000 addresses; at 40,000 four worker processes reading it at once took 85-102 s per new
space. A router seen answering other spaces' rows (`note_shared`) is read whole by `refresh`
instead (a task of the background worker, workers/tasks.py, each MAAS_RESYNC_INTERVAL), no more
often than every SHARED_SECONDS and than ten times the read's last duration, and its rows are
stored in Redis by owner. A space's full diff starts from its rows there, brought up to date by
a READ by name of each entity a run of the space touched since the read began (touched.py:
every run records its keys as it sends them, in whatever process). So a full diff costs what
its space holds, whatever the router holds, and no run holds its space's turn for a whole read.

Where no stored tables serve (none yet, older than USABLE_SECONDS, of a run of the router
before a restart, or the record that vouches for them lost), a full diff READs by name the
entities its space should have and those its runs touched lately (`by_name`): still the cost
of the space; only a teardown, which must find every entity of the space, then reads its own
QUERY. The embedded router filters by name and is never read whole here."""
import json
import logging
import secrets
import threading
import time
from dataclasses import dataclass

import redis

from workers.agents.router import desired as rc
from workers.agents.router import touched
from workers.clients.qdr import Management, ManagementError

logger = logging.getLogger(__name__)

SHARED_SECONDS = 60.0  # at least between two whole reads: what changed by hand shows by then
READ_SHARE = 0.1  # at most this share of the router's management time goes to whole reads
# Stored tables older than this are not used: with LOOKBACK_SECONDS, well within
# touched.KEPT_SECONDS, the touch records that bring them up to date.
USABLE_SECONDS = 3000.0
# A reader that died lets another read after this; a live one renews it every READ_LOCK_RENEW
# seconds, however long its read takes (at 100,000 addresses on qdrouterd one ran past 25
# minutes under a fill, and the next tick's task began a second whole read beside it).
READ_LOCK_SECONDS = 300
READ_LOCK_RENEW = 60
# Entities touched this long before a read began are READ anew too: the workers' clocks may
# differ, and a request recorded before it was sent may land after the read saw its row (the
# record made once it is answered is lost with a process that died in between).
LOOKBACK_SECONDS = 60.0
STORED = "maas:router:tables:"  # + URL: what the stored tables are (JSON); + URL|token: rows
_WHOLE = "\n"  # a field of every stored generation: gone, the generation expired


@dataclass
class Tables:
    """One whole read of a router: when it began (Unix s), the watch's marker as it was then
    (None: none), the epoch of the record of touched entities it was read under, and its rows,
    {owner prefix: {(type, name): row}}, in memory (`owners`) or stored in Redis (`key`)."""

    began: float
    marker: str | None
    epoch: str
    owners: dict | None = None
    key: str = ""
    seconds: float = 0.0  # how long the read took

    def rows(self, prefix: str) -> dict:
        """Copies of the space's rows (the agent writes fresh autoLink status into them);
        touched.Unknown if the stored generation is gone."""
        if self.owners is not None:
            return {key: dict(row) for key, row in self.owners.get(prefix, {}).items()}
        found, whole = touched.client().hmget(self.key, [prefix, _WHOLE])
        if whole is None:
            raise touched.Unknown("the stored router tables expired")
        return {} if found is None else {
            (etype, row["name"]): row for etype, row in json.loads(found)}


_lock = threading.Lock()
_shared: set[str] = set()  # management URLs of routers seen answering other spaces' rows
_asked: dict[str, float] = {}  # URL -> when Redis last said no process saw it shared


def note_shared(url: str) -> None:
    """The router at `url` answered rows of other spaces to a space's QUERY: from now on its
    tables are read whole by `refresh` for every process."""
    if url in _shared:
        return
    try:
        touched.client().set(STORED + "shared|" + url, 1)
    except redis.RedisError:
        return  # noted next time
    with _lock:
        _shared.add(url)


def is_shared(url: str) -> bool:
    """Whether the router at `url` was seen answering other spaces' rows (this process)."""
    return url in _shared


def _is_shared(url: str) -> bool:
    """Whether any process saw it (Redis, asked at most every SHARED_SECONDS while not): a
    process that just started reads no whole router to learn it."""
    if url in _shared:
        return True
    now = time.monotonic()
    if now - _asked.get(url, -SHARED_SECONDS) < SHARED_SECONDS:
        return False
    _asked[url] = now
    try:
        found = shared(url)
    except redis.RedisError:
        return False
    if found:
        with _lock:
            _shared.add(url)
    return found


def owned(mgmt: Management, prefix: str, wanted=None) -> dict | None:
    """What the router holds of the space `prefix`: its rows in the stored tables, brought up
    to date (`current`); without tables of the router's current run younger than
    USABLE_SECONDS, the entities `wanted` (the keys the space should have) and those touched
    lately, READ by name (`by_name`); or None: the router filters by name, or Redis or the
    router refused (read it by its own QUERY), or `wanted` is None (a teardown: every entity
    the router holds of the space is needed, which only the tables or that QUERY tell)."""
    if not _is_shared(mgmt.url):
        return None
    try:
        kept = stored(mgmt.url)
        if (kept is not None and time.time() - kept.began <= USABLE_SECONDS
                and _marker(mgmt) == kept.marker):
            try:
                return current(mgmt, kept, prefix)
            except touched.Unknown:
                pass  # the tables expired, or Redis lost the record that vouched for them
        return None if wanted is None else by_name(mgmt, prefix, wanted)
    except (ManagementError, touched.Unknown, redis.RedisError):
        return None  # the space's own QUERY tells what is wrong, or reads what is there


def by_name(mgmt: Management, prefix: str, wanted) -> dict:
    """The space's entities among `wanted` and those its runs touched lately (a deleted
    address's), READ by name: what a diff needs of the router when no tables serve, at the
    cost of the space, not of the router. Misses only an entity of the space neither wanted
    nor touched within touched.KEPT_SECONDS (made by hand, or left by a run that died), which
    the next diff from tables deletes."""
    keys = sorted(set(wanted) | touched.since(mgmt.url, prefix, 0.0))
    schema = mgmt.schema()
    return {key: _kept(key[0], row, schema)
            for key, row in zip(keys, mgmt.read_many(keys), strict=True) if row is not None}


def read(mgmt: Management) -> Tables:
    """The router's whole tables, read now, in memory (a restore's snapshot)."""
    epoch = touched.epoch(mgmt.url)  # before the read: a record lost during it is told
    began, start = time.time(), time.monotonic()
    marker = _marker(mgmt)
    owners = owned_by_space(mgmt)
    return Tables(began, marker, epoch, owners, seconds=time.monotonic() - start)


def current(mgmt: Management, kept: Tables, prefix: str) -> dict:
    """The space's rows of `kept`, with each entity touched since they were read READ anew by
    name. Raises touched.Unknown if the record cannot tell what was touched."""
    rows = kept.rows(prefix)
    keys = sorted(touched.since(mgmt.url, prefix, kept.began - LOOKBACK_SECONDS, kept.epoch))
    if not keys:
        return rows
    schema = mgmt.schema()
    for key, row in zip(keys, mgmt.read_many(keys), strict=True):
        if row is None:
            rows.pop(key, None)  # gone since the read
        else:
            rows[key] = _kept(key[0], row, schema)
    return rows


def stored(url: str) -> Tables | None:
    """The tables of the router at `url` stored by the last `refresh`, or None."""
    found = touched.client().get(STORED + url)
    if found is None:
        return None
    meta = json.loads(found)
    return Tables(meta["began"], meta["marker"], meta["epoch"], key=meta["key"],
                  seconds=meta["seconds"])


def shared(url: str) -> bool:
    """Whether any process saw the router at `url` answer other spaces' rows (Redis)."""
    return bool(touched.client().exists(STORED + "shared|" + url))


def refresh(mgmt: Management) -> Tables | None:
    """Reads the router whole and stores its tables for every process, unless it filters by
    name (never seen shared), the stored ones are recent enough (SHARED_SECONDS, and ten times
    their read, READ_SHARE) and of the router's current run, or another process reads now:
    the tables stored, or None."""
    url = mgmt.url
    if not shared(url):
        return None
    last = stored(url)
    # Not capped: tables that age past USABLE_SECONDS between two slow reads leave the full
    # diffs to `by_name` meanwhile, which is correct, rather than the router to whole reads
    # (193,231 rows took 375 s in a 100,000-address fill's tail).
    due = max(SHARED_SECONDS, (last.seconds if last else 0) / READ_SHARE)
    if last is not None and time.time() - last.began < due and _marker(mgmt) == last.marker:
        return None
    client, token = touched.client(), secrets.token_hex(8)
    lock = STORED + "reading|" + url
    if not client.set(lock, token, nx=True, ex=READ_LOCK_SECONDS):
        return None
    reading = threading.Event()
    threading.Thread(target=_hold, args=(client, lock, token, reading), daemon=True,
                     name="tables-read-lock").start()
    try:
        kept = read(mgmt)
        kept.key = f"{STORED}{url}|{token}"
        pipe = client.pipeline(transaction=False)
        for owner, rows in kept.owners.items():
            pipe.hset(kept.key, owner, json.dumps([[k[0], row] for k, row in rows.items()]))
        pipe.hset(kept.key, _WHOLE, 1).expire(kept.key, int(USABLE_SECONDS + 60))
        pipe.set(STORED + url, json.dumps({"began": kept.began, "marker": kept.marker,
                                           "epoch": kept.epoch, "key": kept.key,
                                           "seconds": kept.seconds}),
                 ex=int(USABLE_SECONDS))
        if last is not None:  # runs that took it already finish with it
            pipe.expire(last.key, 60)
        pipe.execute()
        logger.info("router.tables_read", extra={
            "router": url, "owners": len(kept.owners), "seconds": round(kept.seconds, 3),
            "rows": sum(len(rows) for rows in kept.owners.values())})
        kept.owners = None  # what a process uses is what it reads back
        return kept
    finally:
        reading.set()
        if client.get(lock) == token.encode():
            client.delete(lock)


def _hold(client, lock: str, token: str, done: threading.Event) -> None:
    """Keeps the read's lock while it reads (until `done`), as long as it is still its own."""
    while not done.wait(READ_LOCK_RENEW):
        try:
            if client.get(lock) != token.encode():
                return
            client.expire(lock, READ_LOCK_SECONDS)
        except redis.RedisError:
            logger.warning("router.tables_lock_unrenewed", extra={"lock": lock}, exc_info=True)


def forget(url: str) -> None:
    """Drops what this process and Redis keep of the router at `url` (tests: another run of a
    router may take its port)."""
    with _lock:
        _shared.discard(url)
        _asked.pop(url, None)
    store = touched.client()
    last = stored(url)
    store.delete(STORED + url, STORED + "shared|" + url, *([last.key] if last else []))


def _marker(mgmt: Management) -> str | None:
    row = mgmt.read(rc.ADDRESS, rc.WATCH_MARKER)
    return None if row is None else str(row.get("prefix"))


def _kept(etype: str, row: dict, schema: dict) -> dict:
    """Of a row, the name and the attributes a diff compares that the router has, None
    dropped: what a whole read keeps of each entity."""
    keep = {"name"} | (rc.ATTRIBUTES[etype] & schema.get(etype, frozenset()))
    return {k: v for k, v in row.items() if k in keep and v is not None}


def owned_by_space(mgmt: Management) -> dict[str, dict]:
    """{owner prefix: {(type, name): row}} of every space's entities on the router, from one
    QUERY per entity type, each row with only the attributes a diff compares (a whole router of
    100,000 addresses is about 250,000 rows): the stored tables, and the router watch's
    snapshot for restoring many spaces at once."""
    owners: dict = {}
    schema = mgmt.schema()
    for etype in rc.ENTITY_TYPES:
        if etype not in schema:
            continue
        # Those the router has: qdrouterd refuses a QUERY naming an attribute it lacks (its
        # connectors have no virtualHost), and an entity never carries one it lacks.
        keep = ["name", *sorted(rc.ATTRIBUTES[etype] & schema[etype])]
        for row in mgmt.query(etype, keep, name_prefix="maas:"):
            name = str(row.get("name", ""))
            if name.count(":") >= 2:
                owner = name[:name.index(":", len("maas:")) + 1]
                owners.setdefault(owner, {})[(etype, name)] = _kept(etype, row, schema)
    return owners
