"""The web's start-up heap is frozen: a full garbage collection no longer walks the ~120,000
objects of modules, settings and models (70-115 ms each on two cores; maas.heap)."""
import json
import os
import subprocess
import sys

from django.conf import settings

PROBE = """
import gc, json
import maas.wsgi
print(json.dumps({"frozen": gc.get_freeze_count(), "tracked": len(gc.get_objects())}))
"""


def test_a_web_worker_starts_with_its_start_up_heap_frozen():
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="maas.settings", MAAS_LOG_LEVEL="WARNING")
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=settings.BASE_DIR, env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    heap = json.loads(out.stdout.strip().splitlines()[-1])
    # Django and the project's modules alone are tens of thousands of objects: all frozen, and
    # next to nothing left for a full collection to walk.
    assert heap["frozen"] > 50_000
    assert heap["tracked"] < heap["frozen"] / 10
