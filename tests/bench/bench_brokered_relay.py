"""Benchmark of a brokered space's AMQP path through the brokered-amqp relay: throughput and
relay CPU per 100-byte message sent and received by its bare name (`orders`), over plain AMQP
and over AMQPS (the client verifying chain and host name), against the same queue straight to
RabbitMQ with its own address forms (ratio). The queue and its exchange are made by the
storage reconciler, as for a tenant.

Several sender and receiver processes (bench_router's clients), rounds alternating the cases;
prints figures and the medians; asserts nothing.

    .venv/bin/python tests/bench/bench_brokered_relay.py [--count 20000] [--clients 2] [--rounds 3]

Against make run's RabbitMQ (127.0.0.1:5672, management 15672, guest).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.bench_router import free_port, rabbit_pid, run_case  # noqa: E402
from tests.router.conftest import wait_port  # noqa: E402
from workers.agents.router.certificates import ensure_self_signed  # noqa: E402
from workers.agents.storage.desired import BrokerQueue, BrokerUser, VhostState  # noqa: E402
from workers.agents.storage.rabbitmq import (  # noqa: E402
    BrokerReconciler,
    RabbitMQApi,
    broker_username,
    hash_password,
)

API = "http://127.0.0.1:15672/api"
PASSWORD = "bench-brokered"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    api = RabbitMQApi(API, "guest", "guest", timeout=30)
    vhost = f"maas-bench-{uuid.uuid4().hex[:8]}"
    user = broker_username(vhost, "bench")
    state = VhostState(vhost, queues=[BrokerQueue("orders", "queue")], users=[BrokerUser(
        user, hash_password(PASSWORD, b"salt"), send=("orders",), recv=("orders",))])
    assert BrokerReconciler(api).apply(state).ok
    where = Path(tempfile.mkdtemp(prefix="bench-relay-"))
    cert, key = str(where / "tls.crt"), str(where / "tls.key")
    ensure_self_signed(cert, key, "127.0.0.1")
    port, tls_port = free_port(), free_port()
    relay = subprocess.Popen(
        [sys.executable, "-m", "dataplane.vhost_relay", "--protocol", "brokered-amqp",
         "--listen", f"127.0.0.1:{port}", "--tls-listen", f"127.0.0.1:{tls_port}",
         "--tls-cert", cert, "--tls-key", key, "--broker", "127.0.0.1:5672", "--api-url", API,
         "--log-level", "WARNING"], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        wait_port(port, process=relay)
        wait_port(tls_port, process=relay)
        login = {"user": user, "password": PASSWORD, "allowed_mechs": "PLAIN",
                 "allow_insecure_mechs": True}
        cases = {
            "direct": (("amqp://127.0.0.1:5672", {**login, "virtual_host": f"vhost:{vhost}"},
                        "/exchange/orders"),
                       ("amqp://127.0.0.1:5672", {**login, "virtual_host": f"vhost:{vhost}"},
                        "/amq/queue/orders")),
            "relay": ((f"amqp://127.0.0.1:{port}", login, "orders"),) * 2,
            "relay-tls": ((f"amqps://127.0.0.1:{tls_port}",
                           {**login, "virtual_host": "localhost", "ca": cert}, "orders"),) * 2,
        }
        pids = {"relay": relay.pid}
        beam = rabbit_pid()
        if beam:
            pids["rabbit"] = beam
        print(f"{args.count} x 100-byte messages, {args.clients} sender and {args.clients} "
              f"receiver processes, {os.cpu_count()} CPUs, {args.rounds} rounds")
        results = {k: [] for k in cases}
        for _ in range(args.rounds):
            for name, (send, recv) in cases.items():
                results[name].append(run_case(f"queue, {name}", send, recv, args.count,
                                              args.clients, False, pids))
        rate = {k: statistics.median(r["rate"] for r in v) for k, v in results.items()}
        line = [f"direct {rate['direct']:.0f} msgs/s"]
        for name in ("relay", "relay-tls"):
            cpu = statistics.median(r["relay_us_per_msg"] for r in results[name])
            line.append(f"{name} {rate[name]:.0f} msgs/s (ratio "
                        f"{rate[name] / rate['direct']:.2f}, relay CPU {cpu:.1f} us/msg)")
        print("median: " + "; ".join(line))
    finally:
        relay.terminate()
        relay.wait(10)
        BrokerReconciler(api).teardown(vhost)
        api.close()


if __name__ == "__main__":
    main()
