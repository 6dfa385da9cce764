"""A shared router's tables, read whole once for the full diffs of many spaces (this process).

qdrouterd has no `namePrefix`: a QUERY answers every space's entities, so each full diff (every
drift check) of one space read the whole router: 10,307 rows and 784 ms at 5,000 addresses,
and a fleet's drift checks cost the square of the fleet. A router seen answering other spaces'
rows (`note_shared`) is read whole instead, kept for SHARED_SECONDS, and a space's full diff
starts from its rows there, brought up to date by a READ by name of each entity a run of the
space touched since the read began (touched.py: every run records its keys as it sends them,
in whatever process). So a space changed since the read, a moment ago and elsewhere, still
costs a diff of its own size, not a whole read while it holds its turn.

The kept tables are not used, and the space reads its own QUERY, when the space's state is
invalidated, the record of touched entities cannot vouch for them (Redis lost it, or cannot be
read), or a read is refused; they are read anew when the router's watch marker (a READ) is not
the one the read saw: a router restarted since holds nothing of them. The embedded router
filters by name and is never read whole here."""
import threading
import time
from dataclasses import dataclass

from workers.agents.router import desired as rc
from workers.agents.router import touched
from workers.clients.qdr import Management, ManagementError

SHARED_SECONDS = 60.0  # a drift check tick's worth: what changed by hand shows within a tick
CLOCK_SKEW = 2.0  # seconds between the workers' clocks that the touch times tolerate


@dataclass
class Tables:
    """One whole read of a router: {owner prefix: {(type, name): row}}, when it began (Unix s),
    the watch's marker as it was then (None: none), and the epoch of the record of touched
    entities it was read under."""

    began: float
    marker: str | None
    owners: dict
    epoch: str


_lock = threading.Lock()
_shared: set[str] = set()  # management URLs of routers seen answering other spaces' rows
_tables: dict[str, Tables] = {}


def note_shared(url: str) -> None:
    """The router at `url` answered rows of other spaces to a space's QUERY."""
    with _lock:
        _shared.add(url)


def is_shared(url: str) -> bool:
    """Whether the router at `url` was seen answering other spaces' rows."""
    return url in _shared


def owned(mgmt: Management, prefix: str, state) -> dict | None:
    """What the router holds of the space `prefix`: its rows in the kept tables (read whole
    anew when too old or the router restarted since), brought up to date (`current`); or None:
    the router filters by name, the space's state is invalidated, or the tables cannot be
    trusted (read it by its own QUERY)."""
    if mgmt.url not in _shared or state is None or state.invalidated:
        return None
    with _lock:
        kept = _tables.get(mgmt.url)
    try:
        marker = _marker(mgmt)
        if (kept is None or time.time() - kept.began > SHARED_SECONDS
                or kept.marker != marker):
            kept = read(mgmt, marker)
            with _lock:
                _tables[mgmt.url] = kept
        return current(mgmt, kept, prefix)
    except (ManagementError, touched.Unknown):
        return None  # the space's own QUERY tells what is wrong, or reads what is there


def read(mgmt: Management, marker: str | None = None) -> Tables:
    """The router's whole tables, read now (`marker`: the watch marker as just READ)."""
    epoch = touched.epoch(mgmt.url)  # before the read: a record lost during it is told
    began = time.time()
    if marker is None:
        marker = _marker(mgmt)
    return Tables(began, marker, owned_by_space(mgmt), epoch)


def current(mgmt: Management, kept: Tables, prefix: str) -> dict:
    """The space's rows of `kept`, with each entity touched since they were read READ anew by
    name: copies, as the agent writes the autoLinks' fresh status into the rows it is given.
    Raises touched.Unknown if the record cannot tell what was touched."""
    rows = {key: dict(row) for key, row in kept.owners.get(prefix, {}).items()}
    keys = sorted(touched.since(mgmt.url, prefix, kept.began - CLOCK_SKEW, kept.epoch))
    if not keys:
        return rows
    schema = mgmt.schema()
    for key, row in zip(keys, mgmt.read_many(keys), strict=True):
        if row is None:
            rows.pop(key, None)  # gone since the read
        else:
            rows[key] = _kept(key[0], row, schema)
    return rows


def forget() -> None:
    """Drops every kept table (tests)."""
    with _lock:
        _shared.clear()
        _tables.clear()


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
    100,000 addresses is about 250,000 rows): the kept tables, and the router watch's snapshot
    for restoring many spaces at once."""
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
