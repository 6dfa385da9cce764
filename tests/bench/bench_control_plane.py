"""Control-plane figures (printed, not asserted): API create latency and time to Active.

Creates SPACES brokered address spaces x QUEUES queues over the REST API of a running
platform (`make run`, or the processes this script starts itself with --start), and reports
API create latency p50/p99 (and p99 over the last 10% of creates, i.e. with ~10,000 addresses
present) and time from the create call to Active p50/p99.

    .venv/bin/python tests/bench/bench_control_plane.py --spaces 100 --queues 100 --start

The spaces are created first and the creates start once they are all Active (steady state);
creates go round-robin over the spaces, one at a time. Time to Active is measured twice:

- polled by the client on every 10th create (8 threads, every 20 ms; this load slows the
  creates too; `--poll-every 0` turns it off);
- for every address, from what the platform recorded, without polling: when the storage
  agent committed the address's event as applied (`AppliedEvent.applied_at`, from then on
  the API shows it Active) minus the wall-clock time of the create call (same machine). The
  script first waits until every address is Active.

The tenant keeps an address quota (at least the number created), so the tenant-wide check is
part of every create. At the end the spaces are deleted and the script waits until the agents
removed them (and their RabbitMQ vhosts). `--log FILE` keeps the platform's output.

With --start the platform gets Celery queues of its own (`maas-bench-*`, with their `-resync`
and `-usage` queues), so tasks other runs left in Redis are not in its way; they are deleted
when it stops. Point DATABASE_URL at a database of its own to keep its data apart.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tests.bench.common import delete_queues  # noqa: E402


def pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))] * 1000


def manage(*args) -> str:
    out = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, check=True,
                         capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def applied_times(slug: str) -> dict[str, list[float]]:
    """{address name: [epoch seconds the storage agent recorded its creation as applied,
    seconds from the event appended to applied]}."""
    code = (
        "import json; from config_service.models import AppliedEvent as A; "
        "rows = A.objects.filter(kind='storage', event__type='address.created', "
        f"event__tenant__slug='{slug}').values_list('event__payload__name', 'applied_at', "
        "'latency_seconds'); "
        "print(json.dumps({n: [t.timestamp(), s] for n, t, s in rows}))"
    )
    out = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT,
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--spaces", type=int, default=100)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--start", action="store_true", help="start web + worker + beat")
    parser.add_argument("--log", help="with --start: write the platform's output here")
    parser.add_argument("--poll-every", type=int, default=10,
                        help="poll every Nth address for Active (0: only the recorded times)")
    args = parser.parse_args()

    platform = queue = None
    if args.start:
        out = open(args.log, "w") if args.log else subprocess.DEVNULL  # noqa: SIM115
        # A Celery queue of its own: tasks other runs left in the shared one are not ours.
        env = dict(os.environ)
        if "MAAS_CELERY_QUEUE" not in env:
            queue = env["MAAS_CELERY_QUEUE"] = f"maas-bench-{uuid.uuid4().hex[:6]}"
        platform = subprocess.Popen([sys.executable, "manage.py", "runplatform"], cwd=ROOT,
                                    stdout=out, stderr=subprocess.STDOUT, env=env)
        for _ in range(60):
            try:
                if requests.get(args.url + "/healthz", timeout=1).ok:
                    break
            except requests.RequestException:
                time.sleep(1)
    slug = f"bench-{uuid.uuid4().hex[:6]}"
    manage("createtenant", slug, "--owner", f"{slug}-owner")
    token = manage("apitoken", f"{slug}-owner")
    total = args.spaces * args.queues
    manage("shell", "-c", f"from tenants.models import TenantQuota as Q; "
           f"Q.objects.filter(tenant__slug='{slug}').update(max_address_spaces=None, "
           f"max_addresses=max(10000, {total}))")
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    base = f"{args.url}/api/v1/tenants/{slug}/addressspaces/"
    for s in range(args.spaces):
        r = session.post(base, json={"metadata": {"name": f"s{s}"},
                                     "spec": {"type": "brokered",
                                              "plan": "brokered-single-broker"}})
        r.raise_for_status()
    waited = time.monotonic()
    while time.monotonic() - waited < 300:
        items = session.get(base, params={"limit": 1000}).json()["items"]
        if sum(i["status"]["phase"] == "Active" for i in items) == args.spaces:
            break
        time.sleep(0.5)
    print(f"{args.spaces} spaces Active after {time.monotonic() - waited:.1f} s")

    latencies, to_active, never, called_at = [], [], [], {}
    lock = threading.Lock()
    pollers = ThreadPoolExecutor(max_workers=8)

    def poll(url, started):
        poll_session = requests.Session()
        poll_session.headers["Authorization"] = f"Bearer {token}"
        deadline = started + 120
        while time.monotonic() < deadline:
            if poll_session.get(url).json()["status"]["phase"] == "Active":
                with lock:
                    to_active.append(time.monotonic() - started)
                return
            time.sleep(0.02)
        with lock:
            never.append(url)

    every = args.poll_every
    began = time.monotonic()
    for q in range(args.queues):  # round-robin over spaces, like many tenants at once
        for s in range(args.spaces):
            url = f"{base}s{s}/addresses/"
            called_at[f"s{s}.q{q}"] = time.time()
            started = time.monotonic()
            r = session.post(url, json={"metadata": {"name": f"s{s}.q{q}"}, "spec": {
                "address": f"q{q}", "type": "queue", "plan": "brokered-queue"}})
            latencies.append(time.monotonic() - started)
            r.raise_for_status()
            if every and (q * args.spaces + s) % every == 0:  # sample time-to-Active
                pollers.submit(poll, f"{url}s{s}.q{q}/", started)
    created_in = time.monotonic() - began
    pollers.shutdown(wait=True)
    tail = latencies[-max(1, total // 10):]
    print(f"addresses created: {total} in {args.spaces} brokered spaces in {created_in:.0f} s"
          f" ({total / created_in:.1f}/s, one at a time)")
    print(f"API create latency  p50 {pct(latencies, 50):.1f} ms  p99 {pct(latencies, 99):.1f} ms"
          f"  (last 10%, ~{total} present: p99 {pct(tail, 99):.1f} ms)")
    if to_active:
        print(f"create to Active    p50 {pct(to_active, 50):.1f} ms  p99 "
              f"{pct(to_active, 99):.1f} ms  (polled on {len(to_active)}; mean "
              f"{statistics.mean(to_active) * 1000:.1f} ms; not Active within 120 s: "
              f"{len(never)})")
    waited = time.monotonic()
    while time.monotonic() - waited < 120:
        active = sum(session.get(f"{base}s{s}/addresses/", params={"phase": "Active", "limit": 1})
                     .json()["metadata"]["totalItems"] for s in range(args.spaces))
        if active == total:
            break
        time.sleep(1)
    recorded = applied_times(slug)
    server = [recorded[name][0] - t for name, t in called_at.items() if name in recorded]
    agent = [latency for _, latency in recorded.values()]
    print(f"create to Active    p50 {pct(server, 50):.1f} ms  p99 {pct(server, 99):.1f} ms"
          f"  (all {len(server)} recorded by the platform, no polling; Active at the end:"
          f" {active}/{total})")
    print(f"  of which event appended to applied by the storage agent  p50 {pct(agent, 50):.1f}"
          f" ms  p99 {pct(agent, 99):.1f} ms")
    for s in range(args.spaces):
        session.delete(f"{base}s{s}/")
    waited = time.monotonic()
    while session.get(base).json()["items"] and time.monotonic() - waited < 600:
        time.sleep(1)  # the agents tear the vhosts down, then the spaces go
    print(f"spaces deleted and torn down in {time.monotonic() - waited:.0f} s")
    if platform:
        platform.terminate()
        platform.wait(timeout=30)
    if queue:
        delete_queues(queue)


if __name__ == "__main__":
    main()
