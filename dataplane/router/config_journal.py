"""The configuration journal: what management created, updated and deleted, one JSON line per
change, synced before the reply leaves, and read back at start, before any listener opens.

A restarted router so comes back with the configuration it had, the router watch's marker
included, and the watch has nothing to restore (workers/agents/router/watch.py). Lines:
`["c", type, name, attributes]`, `["u", type, name, attributes]` (all of them, after the
update) and `["d", type, name]`; the first line is HEADER. The journal is trusted whole or not
at all: a line that is not ours anywhere but at the end (where a kill leaves half a line whose
reply never went out) sets the file aside, and the router starts empty, as without a journal;
the watch then finds its marker gone and restores every space. A write that fails removes the
file for the same reason: a journal that missed a change must not come back as if complete.
"""

import json
import logging
import os
from pathlib import Path

from . import entities as E

logger = logging.getLogger(__name__)

FILE_NAME = "config-journal.jsonl"
HEADER = {"maasRouterConfigJournal": 1}
_HEADER_LINE = json.dumps(HEADER) + "\n"
# Rewrite the journal when it holds more lines than this many times the entities it describes
# (and at least COMPACT_MIN of them): deletes and updates are what make it grow.
COMPACT_FACTOR = 3
COMPACT_MIN = 50_000


def attributes(entity: dict) -> dict:
    """What a line keeps of an entity: its settings, not what the router computes."""
    return {k: v for k, v in entity.items()
            if k not in ("name", "identity", "type") and k not in E.READ_ONLY}


class ConfigJournal:
    """The file in the state directory: `load` once, then `created`/`updated`/`deleted` as
    management changes the store, and `sync` before a reply to management is written."""

    def __init__(self, directory: str | os.PathLike):
        self.path = Path(directory) / FILE_NAME
        self.lines = 0  # in the file, header excluded
        self.unsynced = False
        self.whole = 0  # bytes of the file up to its last whole line, once loaded (0: none)
        self._file = None

    def load(self) -> list[tuple[str, str, dict]]:
        """The entities the journal describes, as (type, name, attributes) in creation order;
        none when the file is missing, empty or not to be trusted (set aside as `.corrupt`)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        if not raw:
            return []
        text = raw.decode("utf-8", errors="replace")
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()  # the file ends in a newline: every line is whole
        else:
            lines.pop()  # half a line: the change it began was never confirmed
        entities: dict[tuple[str, str], dict] = {}
        try:
            if not lines or json.loads(lines[0]) != HEADER:
                raise ValueError("no header")
            for number, line in enumerate(lines[1:], start=2):
                _replay(entities, json.loads(line), number)
        except (ValueError, TypeError, KeyError) as exc:
            self.set_aside(str(exc))
            return []
        self.lines = len(lines) - 1
        self.whole = raw.rfind(b"\n") + 1
        return [(etype, name, attrs) for (etype, name), attrs in entities.items()]

    def reopen(self) -> None:
        """Appends to the file as loaded, cut after its last whole line (so a half line a kill
        left does not run into the next change), instead of rewriting it: cheaper at start."""
        with open(self.path, "r+b") as f:
            f.truncate(self.whole)
            os.fsync(f.fileno())
        self._file = open(self.path, "a", encoding="utf-8", buffering=1 << 20)  # noqa: SIM115

    def set_aside(self, reason: str) -> None:
        self.whole = 0
        aside = self.path.with_name(FILE_NAME + ".corrupt")
        os.replace(self.path, aside)
        logger.error("config_journal.unreadable", extra={
            "path": str(self.path), "moved_to": str(aside), "reason": reason})

    def created(self, entity: dict) -> None:
        self._append(["c", entity["type"], entity["name"], attributes(entity)])

    def updated(self, entity: dict) -> None:
        self._append(["u", entity["type"], entity["name"], attributes(entity)])

    def deleted(self, entity: dict) -> None:
        self._append(["d", entity["type"], entity["name"]])

    def _append(self, item: list) -> None:
        if self._file is None:
            return  # broken: the file is gone, the next start is empty
        try:
            self._file.write(json.dumps(item, separators=(",", ":")) + "\n")
        except (OSError, TypeError, ValueError) as exc:
            self._abandon(exc)
            return
        self.lines += 1
        self.unsynced = True

    def sync(self) -> None:
        """Hands the changes since the last call to the disk (one fsync for however many
        requests one turn of the loop handled), before their replies are written."""
        if not self.unsynced or self._file is None:
            return
        self.unsynced = False
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as exc:
            self._abandon(exc)

    def _abandon(self, exc: Exception) -> None:
        """A change the file may not hold: remove the file so that no start trusts it."""
        logger.error("config_journal.write_failed", extra={"path": str(self.path),
                                                           "error": str(exc)})
        try:
            self._file.close()
        except OSError:
            pass
        self._file = None
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            logger.exception("config_journal.unlink_failed", extra={"path": str(self.path)})

    def due(self, live: int) -> bool:
        """Whether the journal has grown enough beyond the entities it describes to rewrite."""
        return self._file is not None and self.lines > max(COMPACT_MIN, COMPACT_FACTOR * live)

    def rewrite(self, entities) -> None:
        """Replaces the file by one create line per entity, in creation order, atomically (a
        temporary file, fsynced, renamed over it), and opens it for appending."""
        self.close()
        tmp = self.path.with_name(FILE_NAME + ".tmp")
        count = 0
        with open(tmp, "w", encoding="utf-8", buffering=1 << 20) as f:
            os.fchmod(f.fileno(), 0o600)  # connectors' passwords are in it
            f.write(_HEADER_LINE)
            for entity in entities:
                f.write(json.dumps(["c", entity["type"], entity["name"], attributes(entity)],
                                   separators=(",", ":")) + "\n")
                count += 1
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)  # the rename itself survives a crash of the machine
        finally:
            os.close(directory)
        self.lines = count
        self._file = open(self.path, "a", encoding="utf-8", buffering=1 << 20)

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.flush()
                os.fsync(self._file.fileno())
                self._file.close()
            except OSError:
                pass
            self._file = None


def _replay(entities: dict, item, number: int) -> None:
    if not isinstance(item, list) or len(item) < 3:
        raise ValueError(f"line {number} is not a change")
    op, etype, name = item[0], item[1], item[2]
    if etype not in E.SCHEMAS or not isinstance(name, str) or not name:
        raise ValueError(f"line {number} names no entity")
    key = (etype, name)
    if op == "d" and len(item) == 3:
        entities.pop(key, None)
        return
    if len(item) != 4 or not isinstance(item[3], dict):
        raise ValueError(f"line {number} has no attributes")
    if op == "c":
        entities.pop(key, None)  # a create after a delete goes last, as it did
        entities[key] = item[3]
    elif op == "u" and key in entities:
        entities[key] = item[3]  # in place: the entity keeps its position
    else:
        raise ValueError(f"line {number}: {op!r} of an entity not created")
