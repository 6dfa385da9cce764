"""A Spark standalone cluster on this machine, from pyspark's own distribution (`bin/spark-class`,
no download): a master and workers on loopback, each a process group of its own (a worker's
executors die with it, as with its machine). Used by tests/spark/test_cluster.py and
tests/bench/bench_usage.py (--cluster), so it needs neither Django nor pytest."""
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyspark
import requests

SPARK_HOME = Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Cluster:
    """A standalone master and `workers` workers of `cores` cores and `memory` each."""

    def __init__(self, where: Path, workers: int = 2, cores: int = 1, memory: str = "2g"):
        self.where, self.port, self.ui = where, free_port(), free_port()
        self.cores, self.memory = cores, memory
        where.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), PYSPARK_PYTHON=sys.executable,
                        SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(where))
        self.master = self._start("master", "org.apache.spark.deploy.master.Master",
                                  "--host", "127.0.0.1", "--port", str(self.port),
                                  "--webui-port", str(self.ui))
        self.url = f"spark://127.0.0.1:{self.port}"
        self.workers = [self.start_worker(i) for i in range(workers)]
        self.wait_alive(workers)

    def _start(self, name: str, main: str, *args: str) -> subprocess.Popen:
        log = open(self.where / f"{name}.log", "ab")  # noqa: SIM115 (closed with the process)
        return subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), main, *args],
                                env=self.env, stdout=log, stderr=log, start_new_session=True)

    def start_worker(self, i: int) -> subprocess.Popen:
        return self._start(f"worker-{i}", "org.apache.spark.deploy.worker.Worker",
                           self.url, "--host", "127.0.0.1", "--cores", str(self.cores),
                           "--memory", self.memory, "--webui-port", str(free_port()),
                           "--work-dir", str(self.where / f"work-{i}"))

    def wait_alive(self, workers: int) -> None:
        wait_until(lambda: len(self.alive()) == workers, 120, f"{workers} workers alive")

    def state(self) -> dict:
        try:
            return requests.get(f"http://127.0.0.1:{self.ui}/json/", timeout=5).json()
        except (requests.RequestException, ValueError):
            return {}

    def alive(self) -> list:
        return [w for w in self.state().get("workers", []) if w["state"] == "ALIVE"]

    def applications(self) -> set[Path]:
        return set(self.where.glob("work-*/app-*"))

    def running_tasks(self, worker: int, before: set[Path]) -> bool:
        """Whether an executor of an application started since `before` (applications())
        runs tasks on worker `worker` (executors log at INFO into their work directory's
        stderr; the driver shows WARN and above only)."""
        return any("Running task" in log.read_text(errors="replace")
                   for app in (self.where / f"work-{worker}").glob("app-*") if app not in before
                   for log in app.glob("*/stderr"))

    def processes(self) -> dict[str, list[int]]:
        """The cluster's JVMs by role: `master`, `worker`, `executor` (a worker's children)."""
        found: dict[str, list[int]] = {"master": [], "worker": [], "executor": []}
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmdline = (proc / "cmdline").read_bytes().split(b"\0")
                group = os.getpgid(int(proc.name))
            except (OSError, ProcessLookupError):
                continue
            if not cmdline or not cmdline[0].endswith(b"java"):
                continue
            if group == self.master.pid:
                found["master"].append(int(proc.name))
            elif any(group == w.pid for w in self.workers):
                role = b"CoarseGrainedExecutorBackend" in b" ".join(cmdline)
                found["executor" if role else "worker"].append(int(proc.name))
        return found

    def kill(self, process: subprocess.Popen) -> None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(30)

    def stop(self) -> None:
        for process in (*self.workers, self.master):
            self.kill(process)


def peak_rss_mb(pid: int) -> float | None:
    """A process's peak resident memory so far (VmHWM), in MB; None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None
