"""The usage ledger's journal: one JSON line per changed entry, appended every second, read
back at start (the last line of a key wins), rewritten whole when it has grown a few times over.

A line is `[address, phase, epoch, since, distribution, ingress, egress, bytesIn, bytesOut,
accepted, rejected, released, modified, presettled, droppedPresettled]`, or
`[address, phase, null]` for an entry that left the ledger. The first line is HEADER.
"""

import json
import logging
import os
from pathlib import Path

from .counters import Counters

logger = logging.getLogger(__name__)

FILE_NAME = "usage-journal.jsonl"
HEADER = {"maasRouterUsageJournal": 1}
_HEADER_LINE = json.dumps(HEADER) + "\n"
FIELDS = Counters.__slots__  # the counters on a line, in this order


class Record:
    """One entry as the journal has it."""

    __slots__ = ("epoch", "since", "multicast", "values")

    def __init__(self, epoch: str, since: float, multicast: bool, values: list[int]):
        self.epoch = epoch
        self.since = since
        self.multicast = multicast
        self.values = values

    def counters(self) -> Counters:
        c = Counters()
        (c.ingress, c.egress, c.bytes_in, c.bytes_out, c.accepted, c.rejected, c.released,
         c.modified, c.presettled, c.dropped_presettled) = self.values
        return c


def head(key: str, phase: int, epoch: str, since: float, multicast: bool) -> str:
    """The fixed start of an entry's lines, made once per entry (serialising only the
    integers each second is what keeps a flush of many entries cheap)."""
    distribution = "multicast" if multicast else "balanced"
    return json.dumps([key, phase, epoch, since, distribution])[:-1]


def line(head_: str, c: Counters) -> str:
    return (f"{head_},{c.ingress},{c.egress},{c.bytes_in},{c.bytes_out},{c.accepted},"
            f"{c.rejected},{c.released},{c.modified},{c.presettled},{c.dropped_presettled}]\n")


def gone_line(key: str, phase: int) -> str:
    return json.dumps([key, phase, None]) + "\n"


def _parse(text: str):
    """((key, phase), Record or None for gone), or None for a line that is not one of ours."""
    try:
        item = json.loads(text)
    except ValueError:
        return None
    if not isinstance(item, list) or len(item) not in (3, 5 + len(FIELDS)):
        return None
    key, phase = item[0], item[1]
    if not isinstance(key, str) or type(phase) is not int or phase < 0:
        return None
    if len(item) == 3:
        return ((key, phase), None) if item[2] is None else None
    epoch, since, distribution, values = item[2], item[3], item[4], item[5:]
    if not isinstance(epoch, str) or not epoch or type(since) not in (int, float):
        return None
    if distribution not in ("balanced", "multicast"):
        return None
    if any(type(v) is not int or v < 0 for v in values):
        return None
    return (key, phase), Record(epoch, float(since), distribution == "multicast", values)


class Journal:
    """The file in the state directory, opened for appending after `load`."""

    def __init__(self, directory: str | os.PathLike):
        self.path = Path(directory) / FILE_NAME
        self.lines = 0  # appended since the last rewrite
        self.broken = False  # a write failed: the file may end in half a line
        self._file = None

    def load(self) -> dict[tuple[str, int], Record]:
        """The entries the journal holds. A file that is missing or empty holds none; one
        without our header is set aside (`.corrupt`) and holds none; lines that are not ours,
        such as the half line a kill left at the end, are skipped."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        if not raw:
            return {}
        text = raw.decode("utf-8", errors="replace")
        first, _, rest = text.partition("\n")
        try:
            header = json.loads(first)
        except ValueError:
            header = None
        if header != HEADER:
            aside = self.path.with_name(FILE_NAME + ".corrupt")
            os.replace(self.path, aside)
            logger.warning("usage_journal.unreadable", extra={"path": str(self.path),
                                                              "moved_to": str(aside)})
            return {}
        records: dict = {}
        skipped = 0
        for text_line in rest.splitlines():
            parsed = _parse(text_line)
            if parsed is None:
                skipped += text_line.strip() != ""
                continue
            key, record = parsed
            if record is None:
                records.pop(key, None)
            else:
                records[key] = record
        if skipped:
            logger.warning("usage_journal.skipped_lines",
                           extra={"path": str(self.path), "lines": skipped})
        return records

    def append(self, lines: list[str]) -> None:
        """Hand the lines to the kernel. No fsync: a killed process (SIGKILL, OOM) loses
        nothing the kernel already has, and the page cache outlives the process; only a crash
        of the machine itself can lose the last seconds the kernel had not yet written."""
        if self._file is None:
            self._file = open(self.path, "a", encoding="utf-8", buffering=1 << 20)
        self._file.write("".join(lines))
        self._file.flush()
        self.lines += len(lines)

    def rewrite(self, lines: list[str]) -> None:
        """Replace the journal by these lines (every entry), atomically: a temporary file
        renamed over it. Rare, so it is fsynced: a machine crash then never leaves a journal
        that lost its older entries."""
        self.close()
        tmp = self.path.with_name(FILE_NAME + ".tmp")
        with open(tmp, "w", encoding="utf-8", buffering=1 << 20) as f:
            f.write(_HEADER_LINE)
            f.write("".join(lines))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self.lines = len(lines)
        self.broken = False

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None
