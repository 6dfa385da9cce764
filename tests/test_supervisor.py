"""`make run`'s supervisor with real processes: one that exits is started again after a
back-off that doubles with each quick exit and resets after a stable run; the others keep
running throughout; stop ends them all, even one that ignores SIGTERM; each runs in a session
(a scheduling group) of its own."""
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from maas import supervisor as sup
from maas.supervisor import Supervisor
from tests.router.conftest import wait_port

ROOT = Path(__file__).resolve().parents[1]

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]
CRASHER = [sys.executable, "-c", "import sys; sys.exit(3)"]
STUBBORN = [sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)"]


class Clock:
    """Time the test moves by hand, so back-offs are checked without waiting for them."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def wait_exit(proc, timeout=10.0):
    proc.wait(timeout=timeout)


def test_a_process_that_exits_is_restarted_with_a_doubling_backoff_others_untouched():
    clock, lines = Clock(), []
    supervisor = Supervisor({"web": SLEEPER, "worker": CRASHER}, log=lines.append, clock=clock)
    supervisor.start()
    web, worker = supervisor.processes["web"], supervisor.processes["worker"]
    first_web = web.proc.pid
    try:
        delays = []
        for _ in range(4):
            wait_exit(worker.proc)
            supervisor.tick()  # notices the exit, schedules the restart
            delays.append(worker.restart_at - clock.now)
            clock.now = worker.restart_at
            supervisor.tick()  # starts it again
    finally:
        supervisor.stop()

    assert delays == [1.0, 2.0, 4.0, 8.0]
    assert worker.restarts == 4
    assert web.proc.pid == first_web and web.restarts == 0
    assert "worker exited with 3; starting it again in 1 s" in lines
    assert "worker: starting again (restart 1)" in lines


def test_the_backoff_is_capped_and_resets_after_a_stable_run():
    clock = Clock()
    supervisor = Supervisor({"worker": CRASHER}, log=lambda line: None, clock=clock)
    supervisor.start()
    worker = supervisor.processes["worker"]
    try:
        for _ in range(8):
            wait_exit(worker.proc)
            supervisor.tick()
            clock.now = worker.restart_at
            supervisor.tick()
        capped = worker.backoff
        wait_exit(worker.proc)
        clock.now += sup.STABLE  # as if this run had lasted a minute
        supervisor.tick()
        after_stable_run = worker.restart_at - clock.now
    finally:
        supervisor.stop()

    assert capped == sup.MAX_BACKOFF
    assert after_stable_run == sup.FIRST_BACKOFF


def test_stop_ends_every_process_even_one_that_ignores_sigterm():
    supervisor = Supervisor({"web": SLEEPER, "stubborn": STUBBORN}, log=lambda line: None)
    supervisor.start()
    time.sleep(1.0)  # the stubborn one has installed its handler

    started = time.monotonic()
    supervisor.stop(timeout=1.0)

    assert all(not p.running() for p in supervisor.processes.values())
    assert time.monotonic() - started < 5


def test_each_process_has_a_session_of_its_own_and_a_lowered_one_a_lowered_group():
    """Linux shares a busy machine's CPU between sessions first (autogroups): a session per
    process is what makes the web's share its own rather than a slice of the platform's. The
    lowered process is lowered twice, its own niceness and its group's, or it would weigh as
    much as the web."""
    supervisor = Supervisor({"web": SLEEPER, "background": SLEEPER}, log=lambda line: None,
                            nice={"background": 10})
    supervisor.start()
    try:
        web, background = (supervisor.processes[n].proc.pid for n in ("web", "background"))
        deadline = time.monotonic() + 10
        while (not Path(f"/proc/{background}/cmdline").read_bytes().startswith(
                sys.executable.encode()) and time.monotonic() < deadline):
            time.sleep(0.05)  # `nice` sets the niceness, then runs the command
        sessions = {os.getsid(web), os.getsid(background)}
        own_session = os.getsid(0)
        niceness = (os.getpriority(os.PRIO_PROCESS, web),
                    os.getpriority(os.PRIO_PROCESS, background))
        groups = {pid: Path(f"/proc/{pid}/autogroup") for pid in (web, background)}
        group_nice = {pid: int(path.read_text().split()[-1]) if path.exists() else None
                      for pid, path in groups.items()}
    finally:
        supervisor.stop()

    assert sessions == {web, background} and own_session not in sessions
    assert niceness == (os.getpriority(os.PRIO_PROCESS, 0), 10)
    if Path("/proc/self/autogroup").exists():  # a kernel with autogroups (this machine's)
        assert group_nice == {web: 0, background: 10}


@pytest.mark.slow  # five process starts
def test_a_process_whose_port_is_taken_is_named_failing_and_runs_again_once_it_is_free(
        tmp_path):
    """The vhost relay on a port another socket holds exits at once (Errno 98), as the auth
    service or the gateway would: after FAILING_AFTER quick exits the log and the state file
    say it is failing; once the port is free and it has run for STABLE seconds, it is not."""
    taken = socket.create_server(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    relay = [sys.executable, "-m", "dataplane.vhost_relay", "--listen", f"127.0.0.1:{port}",
             "--broker", "127.0.0.1:1", "--log-level", "ERROR"]
    clock, lines, state = Clock(), [], tmp_path / "processes.json"
    supervisor = Supervisor({"relay": relay, "web": SLEEPER}, log=lines.append, clock=clock,
                            state_file=state, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    supervisor.start()
    p = supervisor.processes["relay"]
    try:
        for _ in range(sup.FAILING_AFTER):
            wait_exit(p.proc)
            supervisor.tick()
            clock.now = p.restart_at
            supervisor.tick()
        states = json.loads(state.read_text())
        assert states["relay"]["failing"] and states["relay"]["exit_code"] == 1
        assert not states["web"]["failing"] and states["web"]["running"]
        assert any(line.startswith("relay keeps failing to start (3 quick exits") for line in lines)

        taken.close()
        for _ in range(2):  # the run started last may have met the port still taken
            try:
                p.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                break  # it listens
            supervisor.tick()
            clock.now = p.restart_at
            supervisor.tick()
        wait_port(port, process=p.proc)
        assert p.running()
        clock.now += sup.STABLE
        supervisor.tick()
        assert not json.loads(state.read_text())["relay"]["failing"]
        assert "relay runs again" in lines
    finally:
        taken.close()
        supervisor.stop()
