"""The nightly usage job on a Spark cluster: a standalone master and two workers started from
pyspark's own distribution (`bin/spark-class`, no download), the job submitted to it by
SPARK_MASTER as the Celery worker would (spark/session.py), the sample store and the results on
a path every executor reaches (this machine's disk). Its tables equal local[*]'s row for row,
and a worker killed while the job runs is survived: its tasks run again on the other one."""
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pyspark
import pytest
import requests

from tests.conftest import wait_for
from tests.router.conftest import free_port

from . import generate
from .generate import DAY, TENANTS
from .test_usage import ORDER

pytestmark = pytest.mark.slow

SPARK_HOME = Path(pyspark.__file__).parent
ROOT = Path(__file__).resolve().parents[2]


class Cluster:
    """A standalone master and `workers` workers (1 core, 2 GiB each) on loopback, each a
    process group of its own (a worker's executors die with it, as with its machine)."""

    def __init__(self, where: Path, workers: int = 2):
        self.where, self.port, self.ui = where, free_port(), free_port()
        where.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), PYSPARK_PYTHON=sys.executable,
                        SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(where))
        self.master = self._start("master", "org.apache.spark.deploy.master.Master",
                                  "--host", "127.0.0.1", "--port", str(self.port),
                                  "--webui-port", str(self.ui))
        self.url = f"spark://127.0.0.1:{self.port}"
        self.workers = [self._start(f"worker-{i}", "org.apache.spark.deploy.worker.Worker",
                                    self.url, "--host", "127.0.0.1", "--cores", "1",
                                    "--memory", "2g", "--webui-port", str(free_port()),
                                    "--work-dir", str(where / f"work-{i}"))
                        for i in range(workers)]
        wait_for(lambda: len(self.alive()) == workers, 120, what=f"{workers} workers alive")

    def _start(self, name: str, main: str, *args: str) -> subprocess.Popen:
        log = open(self.where / f"{name}.log", "ab")  # noqa: SIM115 (closed with the process)
        return subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), main, *args],
                                env=self.env, stdout=log, stderr=log, start_new_session=True)

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

    def kill(self, process: subprocess.Popen) -> None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(30)

    def stop(self) -> None:
        for process in (*self.workers, self.master):
            self.kill(process)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    base = str(tmp_path_factory.mktemp("cluster-usage") / "samples")
    generate.write(generate.generate(), base)
    tenants = tmp_path_factory.mktemp("cluster-tenants") / "tenants.txt"
    tenants.write_text("\n".join(TENANTS) + "\n")
    return base, str(tenants)


class Job:
    """The nightly job's CLI, a driver process of its own on `master`, its log (stderr) kept
    as it comes."""

    def __init__(self, master: str, store: tuple, out: Path):
        base, tenants = store
        env = dict(os.environ, SPARK_MASTER=master, PYSPARK_PYTHON=sys.executable,
                   SPARK_DRIVER_MEMORY="1g", PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "spark.jobs.nightly", "--samples", base, "--day",
             DAY.isoformat(), "--out", str(out), "--tenants", tenants],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stderr),
                                       daemon=True)
        self.reader.start()

    def finish(self, timeout: float = 600) -> str:
        """Waits for the job to succeed; its log."""
        self.proc.wait(timeout)
        self.reader.join(30)
        log = "".join(self.lines)
        assert self.proc.returncode == 0, log[-3000:]
        return log


def tables(out: Path) -> dict[str, list[tuple]]:
    """Every table the job wrote, its rows as sorted tuples (Parquet as written)."""
    found = {}
    for name, columns in ORDER.items():
        rows = pq.read_table(out / name).to_pylist()
        found[name] = sorted(tuple(str(row[c]) for c in columns) for row in rows)
    return found


def test_the_nightly_job_on_a_cluster_equals_local_and_survives_a_lost_worker(store, tmp_path):
    Job("local[2]", store, tmp_path / "local").finish()
    expected = tables(tmp_path / "local")
    assert all(expected[name] for name in ("address_daily", "address_hourly", "tenant_daily"))

    cluster = Cluster(tmp_path / "cluster")
    try:
        log = Job(cluster.url, store, tmp_path / "cluster-out").finish()
        assert tables(tmp_path / "cluster-out") == expected
        # a first run (no tenant_daily history yet) and a day without a next one are quiet
        assert "FileNotFoundException" not in log, log[-3000:]

        # Again, with a worker killed once the driver has both executors and tasks run.
        before = cluster.applications()
        job = Job(cluster.url, store, tmp_path / "survived")
        wait_for(lambda: (cluster.running_tasks(0, before) and cluster.running_tasks(1, before))
                 or job.proc.poll() is not None, 180, what="tasks on both workers")
        assert job.proc.poll() is None, "the job ended before a worker could be killed"
        cluster.kill(cluster.workers[0])
        log = job.finish()
        assert "Lost executor" in log, log[-4000:]  # the driver saw it go, and went on
        assert tables(tmp_path / "survived") == expected
    finally:
        cluster.stop()
