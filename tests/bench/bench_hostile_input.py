"""Hostile-input figures (printed, not asserted): peak memory of the web process and refusal
times for a corpus of bombs (issue 13).

Starts the web process as `runplatform` does (gunicorn `maas.wsgi`, one sync worker, on a free
port) against a database of its own (migrated first), signs in with a personal access token,
and sends each body of the corpus REPEAT times: YAML alias bombs of 7 and 9 levels, JSON and
YAML nested 100,000 levels deep, a body of 8 MiB, duplicate keys, YAML `.nan`, and NUL in a
query parameter and a path segment. It prints, per case, the status and the median time to the
refusal and the peak RSS of the web worker so far (VmHWM in /proc), the overall median, and
the peak RSS before and after the corpus.

    .venv/bin/python tests/bench/bench_hostile_input.py --repeat 20

`--database-url` names the database (created if missing, and then dropped at the end unless
`--keep`; default `maas_bench_input` on the local PostgreSQL); the web process gets a Celery
queue of its own, deleted at the end; `--log FILE` keeps the web process's output.
"""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from urllib.parse import urlparse

import psycopg
import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tests.bench.common import delete_queues, drop_database  # noqa: E402
from tests.security.corpus import deep_json, deep_yaml, yaml_alias_bomb  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_database(url: str) -> bool:
    """Whether it created the database of `url`."""
    parsed = urlparse(url)
    admin = parsed._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        name = parsed.path.lstrip("/")
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
            return True
    return False


def manage(env, *args) -> str:
    out = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""


def vm_hwm_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def worker_pid(master: int) -> int:
    """gunicorn's one worker: the master's child."""
    for _ in range(100):
        with open(f"/proc/{master}/task/{master}/children") as f:
            children = f.read().split()
        if children:
            return int(children[0])
        time.sleep(0.1)
    raise RuntimeError("gunicorn started no worker")


def corpus(tenant: str) -> list[tuple[str, str, str, str | None, str | None]]:
    """(case, method, path, body, content type)."""
    spaces = f"/api/v1/tenants/{tenant}/addressspaces/"
    addresses = spaces + "bench/addresses/"
    yaml_type, json_type = "application/yaml", "application/json"
    return [
        ("YAML alias bomb, 7 levels", "POST", spaces, yaml_alias_bomb(7), yaml_type),
        ("YAML alias bomb, 9 levels", "POST", spaces, yaml_alias_bomb(9), yaml_type),
        ("JSON nested 100,000 deep", "POST", addresses, deep_json(100_000), json_type),
        ("YAML nested 100,000 deep", "POST", addresses, deep_yaml(100_000), yaml_type),
        ("JSON body of 8 MiB", "POST", addresses,
         '{"spec": {"address": "' + "x" * (8 << 20) + '"}}', json_type),
        ("JSON duplicate keys", "POST", spaces,
         '{"metadata": {"name": "d"}, "spec": {"plan": "a", "plan": "b"}}', json_type),
        ("YAML .nan multiplier", "POST", addresses,
         "spec:\n  messageRedelivery: {redeliveryDelayMultiplier: .nan}\n", yaml_type),
        ("NUL in a query parameter", "GET", f"/api/v1/tenants/{tenant}/events/?type=%00",
         None, None),
        ("NUL in a path segment", "GET", addresses + "bench.a%00b/", None, None),
    ]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--database-url",
                        default="postgres://postgres@127.0.0.1:5432/maas_bench_input")
    parser.add_argument("--log", help="write the web process's output here")
    parser.add_argument("--keep", action="store_true",
                        help="leave the database, if the run created it, for a later look")
    args = parser.parse_args()

    # A Celery queue of its own: the one space this creates must not wake anyone's workers.
    queue = f"maas-bench-input-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "DATABASE_URL": args.database_url, "MAAS_CELERY_QUEUE": queue}
    created = ensure_database(args.database_url)
    manage(env, "migrate", "--noinput")
    slug = f"bench-input-{uuid.uuid4().hex[:5]}"
    manage(env, "createtenant", slug, "--owner", slug)
    token = manage(env, "apitoken", slug)

    port = free_port()
    log = open(args.log, "w") if args.log else subprocess.DEVNULL
    web = subprocess.Popen([sys.executable, "-m", "gunicorn", "maas.wsgi", "--bind",
                            f"127.0.0.1:{port}", "--workers", "1", "--timeout", "120"],
                           cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {token}"
        for _ in range(100):
            try:
                session.get(base + "/api/v1/tenants/", timeout=2)
                break
            except requests.ConnectionError:
                time.sleep(0.1)
        worker = worker_pid(web.pid)
        space = {"metadata": {"name": "bench"}, "spec": {"type": "brokered",
                                                         "plan": "brokered-single-broker"}}
        session.post(base + f"/api/v1/tenants/{slug}/addressspaces/", json=space, timeout=10)
        for _ in range(args.repeat):  # the normal path, for the baseline
            session.get(base + f"/api/v1/tenants/{slug}/addressspaces/bench/", timeout=10)
        baseline = vm_hwm_kib(worker)
        print(f"web worker peak RSS after normal requests: {baseline / 1024:6.1f} MiB")
        all_times = []
        for case, method, path, body, content_type in corpus(slug):
            times, statuses = [], set()
            headers = {"Content-Type": content_type} if content_type else {}
            for _ in range(args.repeat):
                started = time.perf_counter()
                response = session.request(method, base + path, data=body, headers=headers,
                                           timeout=120)
                times.append(time.perf_counter() - started)
                statuses.add(response.status_code)
            all_times += times
            size = len(body.encode()) if body else 0
            print(f"{case:28s} {size:>9,d} B  status {sorted(statuses)}  "
                  f"median {statistics.median(times) * 1000:7.1f} ms  "
                  f"peak RSS {vm_hwm_kib(worker) / 1024:6.1f} MiB")
        peak = vm_hwm_kib(worker)
        print(f"median refusal over all cases: {statistics.median(all_times) * 1000:.1f} ms")
        print(f"web worker peak RSS after the corpus:      {peak / 1024:6.1f} MiB "
              f"(+{(peak - baseline) / 1024:.1f} MiB)")
    finally:
        web.terminate()
        web.wait(timeout=30)
        delete_queues(queue)
        # Its one space has no vhost: no worker reads the queue its reconcile is sent to.
        name = urlparse(args.database_url).path.lstrip("/")
        if created and not args.keep:
            drop_database(args.database_url)
            print(f"removed: database {name} dropped")
        elif created:
            print(f"kept (--keep): database {name}")


if __name__ == "__main__":
    main()
