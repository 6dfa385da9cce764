"""A long-lived worker ends Spark's JVM after each usage job (spark.session.release_session),
and the next job starts a working session again. Run in a child process: this test session's
shared SparkSession must live on."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

CHILD = r'''
import json, os, types
os.environ["SPARK_MASTER"] = "local[1]"
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "maas.settings")
import django
django.setup()
from pyspark import SparkContext
from spark.session import get_session, release_session
from workers import tasks
from workers.usage import job

seen = {}

def run_day(day):
    # The job itself needs the database; what is under test is what the task does with the
    # JVM the job started (our own function stands in, the Spark session is real).
    seen["rows"] = get_session("release-test").range(5).count()
    seen["jvm"] = SparkContext._gateway.proc.pid
    return types.SimpleNamespace(status="succeeded")

job.run_day = run_day

def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True

status = tasks.run_usage_job.apply(args=["2026-01-01"]).get()
after_task = {"status": status, "rows": seen["rows"], "jvm_alive": alive(seen["jvm"]),
              "gateway": SparkContext._gateway is not None}
again = get_session("release-test")
rows_again = again.range(3).count()
second = SparkContext._gateway.proc.pid
release_session()
print(json.dumps({"after_task": after_task, "rows_again": rows_again,
                  "new_jvm": second != seen["jvm"], "second_alive": alive(second)}))
'''


def test_the_usage_task_ends_the_jvm_and_the_next_session_starts_again():
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["after_task"] == {"status": "succeeded", "rows": 5, "jvm_alive": False,
                                    "gateway": False}
    assert result["rows_again"] == 3
    assert result["new_jvm"] is True
    assert result["second_alive"] is False
