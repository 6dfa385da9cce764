"""Benchmark of the vhost relay: throughput and relay CPU per 100-byte message sent and received
through `/amq/queue/...` via the relay, against the same straight to RabbitMQ (ratio).

Several sender and receiver processes (bench_router's clients), rounds alternating the two
cases; prints figures and the medians; asserts nothing.

    .venv/bin/python tests/bench/bench_vhost_relay.py [--count 20000] [--clients 2] [--rounds 3]
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.bench_router import GUEST, RABBIT_API, free_port, rabbit_pid, run_case  # noqa: E402

PASSWORD = "bench-relay"


def put(path: str, body=None) -> None:
    requests.put(f"{RABBIT_API}{path}", json=body or {}, auth=GUEST,
                 timeout=60).raise_for_status()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    port = free_port()
    relay = subprocess.Popen([sys.executable, "-m", "dataplane.vhost_relay", "--listen",
                              f"127.0.0.1:{port}", "--log-level", "WARNING"], cwd=ROOT,
                             env=dict(os.environ, PYTHONPATH=str(ROOT)))
    vhost = f"maas-bench-{uuid.uuid4().hex[:8]}"
    user = f"bench@{vhost}"
    quoted = requests.utils.quote(user, safe="")
    try:
        put(f"/vhosts/{vhost}")
        put(f"/users/{quoted}", {"password": PASSWORD, "tags": ""})
        put(f"/permissions/{vhost}/{quoted}", {"configure": ".*", "write": ".*", "read": ".*"})
        for queue in ("rq", "dq"):
            put(f"/queues/{vhost}/{queue}", {"durable": True})
        time.sleep(0.5)  # the relay listens
        login = {"user": user, "password": PASSWORD, "allowed_mechs": "PLAIN",
                 "allow_insecure_mechs": True}
        # The same user both ways; only the direct clients name the vhost themselves.
        via = (f"amqp://127.0.0.1:{port}", login, "/amq/queue/rq")
        direct = ("amqp://127.0.0.1:5672", {**login, "virtual_host": f"vhost:{vhost}"},
                  "/amq/queue/dq")
        pids = {"relay": relay.pid}
        beam = rabbit_pid()
        if beam:
            pids["rabbit"] = beam
        print(f"{args.count} x 100-byte messages, {args.clients} sender and {args.clients} "
              f"receiver processes, {os.cpu_count()} CPUs, {args.rounds} rounds")
        results = {"via": [], "direct": []}
        for _ in range(args.rounds):
            results["direct"].append(run_case("queue direct to RabbitMQ", direct, direct,
                                              args.count, args.clients, False, pids))
            results["via"].append(run_case("queue via vhost relay", via, via, args.count,
                                           args.clients, False, pids))
        rate = {k: statistics.median(r["rate"] for r in v) for k, v in results.items()}
        relay_us = statistics.median(r["relay_us_per_msg"] for r in results["via"])
        print(f"median: via relay {rate['via']:.0f} msgs/s, direct {rate['direct']:.0f} msgs/s, "
              f"ratio {rate['via'] / rate['direct']:.2f}; relay CPU {relay_us:.1f} us per "
              f"message sent and received")
    finally:
        relay.terminate()
        relay.wait(10)
        requests.delete(f"{RABBIT_API}/vhosts/{vhost}", auth=GUEST, timeout=60)
        requests.delete(f"{RABBIT_API}/users/{quoted}", auth=GUEST, timeout=60)


if __name__ == "__main__":
    main()
