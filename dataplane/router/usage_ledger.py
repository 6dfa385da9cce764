"""The usage ledger: delivery counters per (qualified address, phase) that outlive the address
node (its last link detaching) and, with a journal, the router process.

A node made for a metered key takes its entry's Counters object, so forwarding counts into the
ledger and does nothing more per message. An entry has an epoch unique to its Counters instance
(`<run>.<n>`, the run new at every start of the router) and `since`, when it began counting (UTC
seconds): the usage metering tells a counter that grew from one that started again by them. An
entry whose address has neither configuration nor node leaves the ledger: when its address
configuration is deleted, when its node goes, or at the latest at the next sweep.
"""

import itertools
import logging
import os
import secrets
import time

from . import usage_journal as J
from .counters import Counters
from .entities import is_wildcard, token_prefixes

logger = logging.getLogger(__name__)

FLUSH_INTERVAL = 1.0  # seconds between journal appends: what a SIGKILL can lose at most
SWEEP_EVERY = 60.0
SWEEP_BUDGET = 1000  # entries looked at per second during a sweep, so it never stalls the loop
COMPACT_FACTOR = 4  # rewrite the journal when it holds this many lines per entry...
COMPACT_SLACK = 1024  # ...plus this many


class Entry:
    """One address's counters and what identifies them."""

    __slots__ = ("key", "phase", "counts", "epoch", "since", "multicast", "mark", "head", "gone")

    def __init__(self, key: str, phase: int, counts: Counters, epoch: str, since: float,
                 multicast: bool):
        self.key = key
        self.phase = phase
        self.counts = counts
        self.epoch = epoch
        self.since = since
        self.multicast = multicast
        self.mark = -1  # signature() when last journalled
        self.head = ""  # usage_journal.head(), made when first needed
        self.gone = False  # dropped from the ledger


def signature(c: Counters) -> int:
    """Grows with every change of the counters (bytes and presettled move with ingress or
    egress), so one comparison tells whether an entry changed since it was journalled."""
    return (c.ingress + c.egress + c.accepted + c.rejected + c.released + c.modified
            + c.dropped_presettled)


class UsageLedger:
    """The router's entries by (qualified address, phase), and their journal if it has one."""

    def __init__(self, configured, clock=time.time):
        self.configured = configured  # qualified address -> its address configuration or None
        self.clock = clock
        self.entries: dict[tuple[str, int], Entry] = {}
        self.live: dict[tuple[str, int], Entry] = {}  # the entries that have a node
        # token prefix -> keys of the entries below it (not at it: those are found in
        # `entries`): an address configuration's delete looks at the entries it matched, not
        # at the whole ledger
        self._under: dict[str, set[tuple[str, int]]] = {}
        self.run = secrets.token_hex(4)
        self._seq = itertools.count(1)
        self.journal: J.Journal | None = None
        self._pending: set[Entry] = set()  # to journal at the next flush
        self._gone: list[tuple[str, int]] = []
        self._total = -1  # signature() of the router's totals at the last flush
        self._sweep = None
        self._next_sweep = 0.0

    # -- nodes -------------------------------------------------------------------------------
    def attach(self, key: str, phase: int, multicast: bool) -> Counters:
        """The counters for a new node of this key, the entry's if it has one."""
        k = (key, phase)
        entry = self.entries.get(k)
        if entry is None:
            entry = self._add(key, phase, Counters(), f"{self.run}.{next(self._seq)}",
                              self.clock(), multicast)
        elif entry.multicast != multicast:
            entry.multicast, entry.head = multicast, ""
            self._note(entry)
        self.live[k] = entry
        return entry.counts

    def detach(self, key: str, phase: int) -> None:
        """The node of this key is gone; the entry stays while its address is configured."""
        k = (key, phase)
        entry = self.live.pop(k, None)
        if entry is None:
            return
        self._note(entry)  # its last counts, if they changed since the last flush
        if self.configured(key) is None:
            self._drop(k)

    # -- configuration -----------------------------------------------------------------------
    def config_deleted(self, entity: dict) -> None:
        """An address configuration is gone: drop the entries it matched that have no node and
        no other configuration. A wildcard pattern is left to the sweep."""
        prefix, pattern = entity.get("prefix"), entity.get("pattern")
        address = prefix if prefix is not None else pattern
        if not address or (prefix is None and is_wildcard(pattern)):
            return
        # the address itself in the phases clients and autoLinks use (others: the sweep)
        keys = [k for k in ((address, 0), (address, 1)) if k in self.entries]
        if prefix is not None:
            keys += self._under.get(prefix, ())
        for k in keys:
            if k not in self.live and self.configured(k[0]) is None:
                self._drop(k)

    def sweep_step(self, budget: int = SWEEP_BUDGET) -> None:
        """Look at the next `budget` entries of a sweep (one every SWEEP_EVERY seconds) and
        drop those with neither node nor configuration. The router must have been up long
        enough for the agents to configure it again, which the caller sees to."""
        now = time.monotonic()
        if self._sweep is None:
            if now < self._next_sweep:
                return
            self._sweep = iter(list(self.entries))
        seen = 0
        for k in itertools.islice(self._sweep, budget):
            seen += 1
            if k in self.entries and k not in self.live and self.configured(k[0]) is None:
                self._drop(k)
        if seen < budget:
            self._sweep = None
            self._next_sweep = now + SWEEP_EVERY

    # -- journal -----------------------------------------------------------------------------
    def open_journal(self, directory: str | os.PathLike) -> None:
        """Read back the entries of the journal in `directory`, keeping their epochs and
        since, and journal from now on (rewritten at once: a half line a kill left at its end
        must not run into the next line appended)."""
        os.makedirs(directory, exist_ok=True)
        journal = J.Journal(directory)
        for (key, phase), record in journal.load().items():
            entry = self._add(key, phase, record.counters(), record.epoch, record.since,
                              record.multicast)
            entry.mark = signature(entry.counts)
        self._pending.clear()
        self._gone.clear()
        self.journal = journal
        self._rewrite()
        logger.info("usage_ledger.loaded", extra={"path": str(journal.path),
                                                  "entries": len(self.entries)})

    def flush(self, total: Counters) -> int:
        """Append the entries that changed since the last flush (and the new and the dropped
        ones) to the journal; returns how many lines. Only entries with a node can change, and
        none did if the router's totals did not move."""
        if self.journal is None:
            return 0
        now_total = signature(total)
        if now_total != self._total:
            self._total = now_total
            pending = self._pending
            for entry in self.live.values():
                c = entry.counts
                if (c.ingress + c.egress + c.accepted + c.rejected + c.released + c.modified
                        + c.dropped_presettled) != entry.mark:  # signature(), inlined: the
                    pending.add(entry)  # loop runs over every node that has links
        if not self._pending and not self._gone and not self.journal.broken:
            return 0
        lines = [J.gone_line(*k) for k in self._gone]
        line = self._line
        lines += [line(entry) for entry in self._pending if not entry.gone]
        self._pending.clear()
        self._gone.clear()
        try:
            if self.journal.broken or self.journal.lines + len(lines) > (
                    COMPACT_FACTOR * len(self.entries) + COMPACT_SLACK):
                self._rewrite()
            else:
                self.journal.append(lines)
        except OSError:
            # Counters stay in memory; the whole ledger is written at the next flush that can.
            self.journal.broken = True
            logger.exception("usage_ledger.journal_failed", extra={"path": str(self.journal.path)})
        return len(lines)

    def close(self, total: Counters) -> None:
        """Flush (a graceful stop loses nothing) and close the journal."""
        if self.journal is not None:
            self.flush(total)
            self.journal.close()

    # -- internals ---------------------------------------------------------------------------
    def _add(self, key, phase, counts, epoch, since, multicast) -> Entry:
        k = (key, phase)
        entry = self.entries[k] = Entry(key, phase, counts, epoch, since, multicast)
        for prefix in list(token_prefixes(key))[1:-1]:
            self._under.setdefault(prefix, set()).add(k)
        self._note(entry)
        return entry

    def _drop(self, k: tuple[str, int]) -> None:
        entry = self.entries.pop(k, None)
        if entry is None:
            return
        entry.gone = True
        for prefix in list(token_prefixes(k[0]))[1:-1]:
            bucket = self._under.get(prefix)
            if bucket is not None:
                bucket.discard(k)
                if not bucket:
                    del self._under[prefix]
        if self.journal is not None:
            self._gone.append(k)
        logger.debug("usage_ledger.dropped", extra={"address": k[0], "phase": k[1]})

    def _note(self, entry: Entry) -> None:
        if self.journal is not None:
            self._pending.add(entry)

    def _line(self, entry: Entry) -> str:
        if not entry.head:
            entry.head = J.head(entry.key, entry.phase, entry.epoch, entry.since,
                                entry.multicast)
        entry.mark = signature(entry.counts)
        return J.line(entry.head, entry.counts)

    def _rewrite(self) -> None:
        self.journal.rewrite([self._line(e) for e in self.entries.values()])
