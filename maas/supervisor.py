"""Keeps the platform's processes running on one machine, as Kubernetes would: a process that
exits on its own is started again after a back-off that doubles with each quick exit (1 s up to
MAX_BACKOFF) and resets once it has stayed up for STABLE seconds. One crashing process (a
Celery worker that gave up when Redis went away, say) no longer takes the platform down.

A process that exits quickly FAILING_AFTER times in a row (its port is taken, say) is failing:
the supervisor says so once in its log and in `state_file` (JSON, each process's state), which
/readyz reads (maas/health.py), so that a platform with a dead auth service is not "ready".

Each process runs in a session of its own, so that Linux, which shares the CPU between
sessions first (autogroups) when the machine is busy, gives each of the platform's processes
the share a container of its own gets on Kubernetes, instead of one share for them all beside
each RabbitMQ node's and PostgreSQL's (docs/scale.md, "A scheduling group per process")."""
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

FIRST_BACKOFF = 1.0
MAX_BACKOFF = 30.0
STABLE = 60.0  # seconds up after which a process counts as healthy again
FAILING_AFTER = 3  # quick exits in a row after which a process is failing


class Supervised:
    """One command, its current process and its restart bookkeeping."""

    def __init__(self, name: str, command: list[str], env: dict | None, nice: int = 0):
        self.name, self.command, self.env, self.nice = name, command, env, nice
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0
        self.backoff = FIRST_BACKOFF
        self.restart_at: float | None = None
        self.restarts = 0
        self.quick_exits = 0  # exits in a row, each before STABLE seconds up
        self.exit_code: int | None = None

    @property
    def failing(self) -> bool:
        return self.quick_exits >= FAILING_AFTER

    def state(self) -> dict:
        return {"running": self.running(), "restarts": self.restarts, "failing": self.failing,
                "quick_exits": self.quick_exits, "exit_code": self.exit_code}

    def start(self, now: float) -> None:
        command = ["nice", "-n", str(self.nice), *self.command] if self.nice else self.command
        self.proc = subprocess.Popen(command, env=self.env, start_new_session=True)
        if self.nice:
            group_nice(self.proc.pid, self.nice)
        self.started_at, self.restart_at = now, None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def group_nice(pid: int, nice: int) -> None:
    """Gives the scheduling group (autogroup) of `pid`'s session the niceness `nice`: within
    its own session a process's niceness weighs against nothing. A kernel without autogroups
    has no such file, and the process's own niceness is all there is."""
    try:
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))
    except OSError:
        pass


class Supervisor:
    """Starts every command, restarts those that exit, and stops them all on request.
    `nice` runs some at a lower CPU priority: {name: niceness}."""

    def __init__(self, commands: dict[str, list[str]], env: dict | None = None,
                 log: Callable[[str], None] = print, clock: Callable[[], float] = time.monotonic,
                 nice: dict[str, int] | None = None, state_file: Path | None = None):
        self.log, self.clock, self.state_file = log, clock, state_file
        self.processes = {name: Supervised(name, cmd, env, (nice or {}).get(name, 0))
                          for name, cmd in commands.items()}

    def start(self) -> None:
        now = self.clock()
        for supervised in self.processes.values():
            supervised.start(now)
        self._publish()

    def _publish(self) -> None:
        """Writes every process's state to `state_file` (whole, then renamed into place)."""
        if self.state_file is None:
            return
        states = {name: p.state() for name, p in self.processes.items()}
        partial = self.state_file.with_suffix(".tmp")
        partial.write_text(json.dumps(states, indent=1))
        os.replace(partial, self.state_file)

    def tick(self) -> None:
        """Notices exits and restarts what is due; called every half second or so."""
        now = self.clock()
        changed = False
        for p in self.processes.values():
            if p.restart_at is not None:
                if now >= p.restart_at:
                    p.restarts += 1
                    self.log(f"{p.name}: starting again (restart {p.restarts})")
                    p.start(now)
                    changed = True
                continue
            if p.running():
                if now - p.started_at >= STABLE and (p.quick_exits or p.backoff > FIRST_BACKOFF):
                    if p.failing:
                        self.log(f"{p.name} runs again")
                    p.backoff, p.quick_exits = FIRST_BACKOFF, 0
                    changed = True
                continue
            code = p.proc.returncode if p.proc else None
            if now - p.started_at >= STABLE:
                p.backoff, p.quick_exits = FIRST_BACKOFF, 0  # it ran well: this exit is news
            p.quick_exits += 1
            p.exit_code = code
            self.log(f"{p.name} exited with {code}; starting it again in {p.backoff:g} s")
            if p.quick_exits == FAILING_AFTER:
                self.log(f"{p.name} keeps failing to start ({p.quick_exits} quick exits in a "
                         f"row, the last with {code}): its own lines above say why; /readyz "
                         "names it until it runs")
            p.restart_at = now + p.backoff
            p.backoff = min(p.backoff * 2, MAX_BACKOFF)
            changed = True
        if changed:
            self._publish()

    def stop(self, timeout: float = 10.0) -> None:
        for p in self.processes.values():
            if p.running():
                p.proc.terminate()
        for p in self.processes.values():
            if p.proc is None:
                continue
            try:
                p.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.proc.kill()
                p.proc.wait()
