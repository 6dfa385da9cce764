"""The nightly usage job on a Spark cluster: a standalone master and two workers started from
pyspark's own distribution (`bin/spark-class`, no download), the job submitted to it by
SPARK_MASTER as the Celery worker would (spark/session.py), the sample store and the results on
a path every executor reaches (this machine's disk). The CLI's tables equal local[*]'s row for
row although a worker is killed while the job runs: its tasks run again on the other one.
The Celery task stores the same rows from the cluster as from local[2], and nothing it computes
comes back through the driver: the driver's event log shows file writes only, no collect and no
broadcast (either would carry rows that grow with the fleet)."""
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from django.conf import settings
from django.test import override_settings

from spark.jobs import nightly
from tenants.models import (
    AddressUsageDaily,
    AddressUsageHourly,
    QuotaEvaluation,
    SpacePeakHourly,
    TenantUsageDaily,
)
from tenants.services import create_tenant
from tests.conftest import CTX, make_user, wait_for
from workers.usage.job import run_day

from . import generate
from .cluster import Cluster
from .generate import DAY, TENANTS
from .test_usage import ORDER

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One cluster for the module's tests (starting one takes seconds of both cores)."""
    started = Cluster(tmp_path_factory.mktemp("spark-cluster"))
    yield started
    started.stop()


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


def test_the_nightly_job_on_a_cluster_equals_local_despite_a_lost_worker(
        spark, cluster, store, tmp_path):
    # The reference: the CLI's main in this process, on the session's local[2].
    nightly.main(["--samples", store[0], "--day", DAY.isoformat(), "--out",
                  str(tmp_path / "local"), "--tenants", store[1]])
    expected = tables(tmp_path / "local")
    assert all(expected[name] for name in ("address_daily", "address_hourly", "tenant_daily"))

    # On the cluster, a worker killed once the driver has both executors and tasks run.
    before = cluster.applications()
    job = Job(cluster.url, store, tmp_path / "survived")
    try:
        wait_for(lambda: (cluster.running_tasks(0, before) and cluster.running_tasks(1, before))
                 or job.proc.poll() is not None, 180, what="tasks on both workers")
        assert job.proc.poll() is None, "the job ended before a worker could be killed"
        cluster.kill(cluster.workers[0])
        log = job.finish()
    finally:
        # The module's other tests get both workers back (a machine that came back).
        cluster.workers[0] = cluster.start_worker(0)
        cluster.wait_alive(2)
    assert "Lost executor" in log, log[-4000:]  # the driver saw it go, and went on
    assert tables(tmp_path / "survived") == expected
    # a first run (no tenant_daily history yet) and a day without a next one are quiet
    assert "FileNotFoundException" not in log, log[-3000:]


# The Celery task's function as a worker process runs it (called directly, no broker), the
# Spark master and the event log set by the environment as a deployment sets them.
TASK = r"""
import json, sys
import django
django.setup()
from workers import tasks
print(json.dumps({"status": tasks.run_usage_job.apply(args=[sys.argv[1]]).get()}))
"""
STORED = (AddressUsageDaily, AddressUsageHourly, SpacePeakHourly, TenantUsageDaily,
          QuotaEvaluation)


def run_task(master: str, base: str, events: Path | None = None) -> None:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="maas.test_settings",
               DATABASE_URL=f"postgres://postgres@127.0.0.1:5432/"
                            f"{settings.DATABASES['default']['NAME']}",
               MAAS_USAGE_STORE=base, SPARK_MASTER=master, PYSPARK_PYTHON=sys.executable,
               SPARK_DRIVER_MEMORY="1g", PYTHONPATH=str(ROOT), MAAS_LOG_LEVEL="WARNING")
    if events is not None:
        events.mkdir()
        env["PYSPARK_SUBMIT_ARGS"] = (
            f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir=file://{events} "
            "--conf spark.eventLog.compress=false --conf spark.eventLog.rolling.enabled=false "
            "pyspark-shell")
    out = subprocess.run([sys.executable, "-c", TASK, DAY.isoformat()], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"status": "succeeded"}


def stored() -> dict[str, list[tuple]]:
    """The rows the task stored, per table, as sorted tuples (tenants by slug)."""
    found = {}
    for model in STORED:
        fields = sorted(f.name for f in model._meta.concrete_fields if f.name not in ("id",))
        rows = model.objects.values_list(*[f if f != "tenant" else "tenant__slug" for f in fields])
        found[model.__name__] = sorted(tuple(str(v) for v in row) for row in rows)
    return found


def driver_reads(events: Path) -> dict[str, list[str]]:
    """From the driver's event log: what each SQL execution that ran Spark jobs did at its
    root, and every plan that broadcast a table (its build side collected to the driver)."""
    roots, with_jobs, broadcasts = {}, set(), []
    for log in events.iterdir():
        for line in log.read_text().splitlines():
            event = json.loads(line)
            kind = event["Event"].rsplit(".", 1)[-1]
            if kind == "SparkListenerSQLExecutionStart":
                node = event["sparkPlanInfo"]
                while node["nodeName"] == "AdaptiveSparkPlan" and node["children"]:
                    node = node["children"][0]
                roots[event["executionId"]] = node["nodeName"]
            if kind == "SparkListenerJobStart":
                execution = event.get("Properties", {}).get("spark.sql.execution.id")
                if execution is not None:
                    with_jobs.add(int(execution))
            if "BroadcastExchange" in event.get("physicalPlanDescription", ""):
                broadcasts.append(event["physicalPlanDescription"])
    return {"roots": sorted({roots.get(e, "?") for e in with_jobs}), "broadcasts": broadcasts}


@pytest.mark.django_db(transaction=True)
def test_the_celery_task_on_a_cluster_stores_what_local_stores_and_reads_nothing_back(
        spark, cluster, store, tmp_path):
    base, _ = store
    owner = make_user("cluster-owner")
    for slug in TENANTS:
        create_tenant(ctx=CTX, slug=slug, owner=owner)
    # The reference: the task's run_day in this process, on the session's local[2].
    with override_settings(MAAS_USAGE_STORE=base):
        assert run_day(DAY, spark=spark).status == "succeeded"
    expected = stored()
    assert expected["AddressUsageHourly"] and expected["SpacePeakHourly"]

    run_task(cluster.url, base, tmp_path / "events")  # replaces the day's rows
    assert stored() == expected
    reads = driver_reads(tmp_path / "events")
    # Every Spark job wrote a table's files; none collected rows or broadcast a table.
    assert reads["roots"] == ["Execute InsertIntoHadoopFsRelationCommand"], reads["roots"]
    assert reads["broadcasts"] == []
