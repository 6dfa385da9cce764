"""A shared router's tables, read whole once for the full diffs of many spaces (this process).

qdrouterd has no `namePrefix`: a QUERY answers every space's entities, so each full diff (every
drift check) of one space read the whole router: 10,307 rows and 784 ms at 5,000 addresses,
and a fleet's drift checks cost the square of the fleet. A router seen answering other spaces'
rows (`note_shared`) is read whole instead, kept for SHARED_SECONDS, and a space's full diff
starts from the kept tables when they still tell what the router holds of it:

- no run of the space recorded a change after the read began (its agent state's `applied_at`,
  written once a run ended), and none in this process began since (`touched`): a run that
  failed halfway records nothing;
- the space's state is not invalidated, and the router's watch marker (a READ) is the one the
  read saw: a router that restarted since holds nothing of it.

A diff from kept tables that meets an entity the router holds but the tables did not (made by
a run elsewhere since) is refused by the router and done again from a fresh read (agent.py,
`_apply`). The embedded router filters by name and is never read whole here."""
import threading
import time
from dataclasses import dataclass

from workers.agents.router import desired as rc
from workers.clients.qdr import Management, ManagementError

SHARED_SECONDS = 60.0  # a drift check tick's worth: one whole read serves the tick's checks
CLOCK_SKEW = 2.0  # seconds between the workers' clocks that `applied_at` tolerates


@dataclass
class Tables:
    """One whole read of a router: {owner prefix: {(type, name): row}}, when it began (Unix s),
    and the watch's marker as it was then (None: none)."""

    began: float
    marker: str | None
    owners: dict


_lock = threading.Lock()
_shared: set[str] = set()  # management URLs of routers seen answering other spaces' rows
_tables: dict[str, Tables] = {}
_touched: dict[tuple[str, str], float] = {}  # (URL, owner prefix) -> when a run began to apply


def note_shared(url: str) -> None:
    """The router at `url` answered rows of other spaces to a space's QUERY."""
    with _lock:
        _shared.add(url)


def is_shared(url: str) -> bool:
    """Whether the router at `url` was seen answering other spaces' rows."""
    return url in _shared


def touch(url: str, prefix: str) -> None:
    """A run of this process is about to change the router's entities of `prefix`."""
    with _lock:
        _touched[(url, prefix)] = time.time()


def owned(mgmt: Management, prefix: str, state) -> dict | None:
    """What the router holds of the space `prefix` as kept tables tell it (read whole anew when
    the kept ones are too old or predate the space's last change), or None: the router
    filters by name, or the space's state is invalidated (read it by its own QUERY)."""
    if mgmt.url not in _shared or state is None or state.invalidated:
        return None
    applied = state.applied_at.timestamp() if state.applied_at else 0.0
    with _lock:
        kept = _tables.get(mgmt.url)
        touched = _touched.get((mgmt.url, prefix), 0.0)
    try:
        marker = _marker(mgmt)
        if (kept is None or time.time() - kept.began > SHARED_SECONDS or kept.marker != marker
                or max(applied + CLOCK_SKEW, touched) >= kept.began):
            kept = Tables(time.time(), marker, owned_by_space(mgmt))
            with _lock:
                _tables[mgmt.url] = kept
    except ManagementError:
        return None  # a read refused: the space's own QUERY tells what is wrong
    # Copies: the agent writes the autoLinks' fresh status into the rows it was given.
    return {key: dict(row) for key, row in kept.owners.get(prefix, {}).items()}


def forget() -> None:
    """Drops every kept table (tests)."""
    with _lock:
        _shared.clear()
        _tables.clear()
        _touched.clear()


def _marker(mgmt: Management) -> str | None:
    row = mgmt.read(rc.ADDRESS, rc.WATCH_MARKER)
    return None if row is None else str(row.get("prefix"))


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
                owners.setdefault(owner, {})[(etype, name)] = {
                    k: v for k, v in row.items() if v is not None}
    return owners
