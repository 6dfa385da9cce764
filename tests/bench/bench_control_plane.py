"""Control-plane figures (printed, not asserted): API create latency and time to Active.

Creates SPACES brokered address spaces x QUEUES queues over the REST API of a running
platform (`make run`, or the processes this script starts itself with --start), and reports
API create latency p50/p99 (and p99 over the last 10% of creates, i.e. with ~10,000 addresses
present) and time from the create call to Active p50/p99, by polling each address.

    .venv/bin/python tests/bench/bench_control_plane.py --spaces 100 --queues 100
"""
import argparse
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


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))] * 1000


def manage(*args) -> str:
    out = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, check=True,
                         capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--spaces", type=int, default=100)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--start", action="store_true", help="start web + worker + beat")
    args = parser.parse_args()

    platform = None
    if args.start:
        platform = subprocess.Popen([sys.executable, "manage.py", "runplatform"], cwd=ROOT,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(60):
            try:
                if requests.get(args.url + "/healthz", timeout=1).ok:
                    break
            except requests.RequestException:
                time.sleep(1)
    slug = f"bench-{uuid.uuid4().hex[:6]}"
    manage("createtenant", slug, "--owner", f"{slug}-owner")
    token = manage("apitoken", f"{slug}-owner")
    manage("shell", "-c", f"from tenants.models import TenantQuota as Q; "
           f"Q.objects.filter(tenant__slug='{slug}').update(max_address_spaces=None, "
           f"max_addresses=None)")
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    base = f"{args.url}/api/v1/tenants/{slug}/addressspaces/"
    for s in range(args.spaces):
        r = session.post(base, json={"metadata": {"name": f"s{s}"},
                                     "spec": {"type": "brokered",
                                              "plan": "brokered-single-broker"}})
        r.raise_for_status()

    latencies, to_active = [], []
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

    total = args.spaces * args.queues
    for q in range(args.queues):  # round-robin over spaces, like many tenants at once
        for s in range(args.spaces):
            url = f"{base}s{s}/addresses/"
            started = time.monotonic()
            r = session.post(url, json={"metadata": {"name": f"s{s}.q{q}"}, "spec": {
                "address": f"q{q}", "type": "queue", "plan": "brokered-queue"}})
            latencies.append(time.monotonic() - started)
            r.raise_for_status()
            if (q * args.spaces + s) % 10 == 0:  # sample time-to-Active on 10% of creates
                pollers.submit(poll, f"{url}s{s}.q{q}/", started)
    pollers.shutdown(wait=True)
    tail = latencies[-max(1, total // 10):]
    print(f"addresses created: {total} in {args.spaces} brokered spaces")
    print(f"API create latency  p50 {pct(latencies, 50):.1f} ms  p99 {pct(latencies, 99):.1f} ms"
          f"  (last 10%, ~{total} present: p99 {pct(tail, 99):.1f} ms)")
    print(f"create to Active    p50 {pct(to_active, 50):.1f} ms  p99 {pct(to_active, 99):.1f} ms"
          f"  (sampled {len(to_active)}; mean {statistics.mean(to_active) * 1000:.1f} ms)")
    for s in range(args.spaces):
        session.delete(f"{base}s{s}/")
    if platform:
        time.sleep(5)  # let the worker tear the vhosts down
        platform.terminate()
        platform.wait(timeout=30)


if __name__ == "__main__":
    main()
