"""What a RabbitMQ node costs at rest as it holds more tenants' objects, under its statistics
settings (printed, not asserted; docs/scale.md "Broker statistics").

Imports VHOSTS vhosts of QUEUES durable queues and a topic exchange each into the node whose
management API is --port (a pool node, e.g. maas1 on 15681: never the default node's tenants),
waits --settle seconds, then reads the node's CPU (its beam process, from /proc) over --window
seconds with nothing connected, REPEAT times, and prints the median share of one core. It also
publishes 7 messages into one queue and prints how long the queue's `message_stats.publish` took
to read 7, the figure metering needs (docs/storage.md "Brokered metering"), and what the node's
settings are. The vhosts are deleted after (--keep leaves them).

Compare settings by restarting the node with others (rabbitmq.conf, which
deploy/local/rabbitmq-nodes.sh copies to the pool's nodes) and running it again:

    bash deploy/local/rabbitmq-nodes.sh start 2
    .venv/bin/python tests/bench/bench_broker_statistics.py --port 15681 --vhosts 250
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tests.bench.common import cpu_seconds  # noqa: E402
from workers.clients.rabbitmq_api import RabbitMQApi  # noqa: E402

PREFIX = "maas-bench-stats-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=15681, help="management port of the node")
    parser.add_argument("--vhosts", type=int, default=250)
    parser.add_argument("--queues", type=int, default=100, help="per vhost")
    parser.add_argument("--settle", type=float, default=30.0)
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    # A definitions import of 25 vhosts and their queues takes minutes on a loaded node.
    api = RabbitMQApi(f"http://127.0.0.1:{args.port}/api", "guest", "guest", timeout=600)
    node = api.request("GET", "/overview")["node"]
    pid = int(erl(node, "os:getpid().").strip('"'))
    print(f"node {node} (os pid {pid}); settings: {settings(api, node)}")
    try:
        started = time.monotonic()
        fill(api, args.vhosts, args.queues)
        print(f"imported {args.vhosts} vhosts x {args.queues} queues in "
              f"{time.monotonic() - started:.0f} s")
        time.sleep(args.settle)
        shares = [cpu_share(pid, args.window) for _ in range(args.repeat)]
        print(f"at rest: median {statistics.median(shares):.1f}% of a core "
              f"({', '.join(f'{s:.1f}' for s in shares)}) over {args.window:.0f} s windows")
        print(f"message_stats.publish read 7 after {publish_lag(api):.1f} s")
    finally:
        if not args.keep:
            for vhost in [v["name"] for v in api.request("GET", "/vhosts")
                          if v["name"].startswith(PREFIX)]:
                api.delete_vhost(vhost)
        api.close()


def settings(api: RabbitMQApi, node: str) -> dict:
    """The node's statistics settings: rates_mode from its management API; from the node
    itself, the emission interval (milliseconds; RabbitMQ's default 5000 when unset) and the
    management agent's copy interval per policy (seconds: the smallest sample interval of each
    of its sample_retention_policies, deploy/local/services.sh)."""
    copy = ("P = rabbit_mgmt_agent_config:get_env(sample_retention_policies), "
            "[{S, lists:min([I || {_, I} <- proplists:get_value(S, P)])} "
            "|| S <- [global, basic, detailed]].")
    return {"rates_mode": api.request("GET", "/overview").get("rates_mode"),
            "collect_statistics_interval":
                erl(node, "application:get_env(rabbit, collect_statistics_interval)."),
            "copied every": " ".join(erl(node, copy).split())}


def erl(node: str, expression: str) -> str:
    """What the node answers to an Erlang expression (rabbitmqctl eval)."""
    return subprocess.run(["rabbitmqctl", "-n", node, "-q", "eval", expression],
                          capture_output=True, text=True, timeout=60, check=True).stdout.strip()


def fill(api: RabbitMQApi, vhosts: int, queues: int, per_post: int = 25) -> None:
    """The vhosts with their queues and exchange, `per_post` vhosts per definitions import."""
    for first in range(0, vhosts, per_post):
        names = [f"{PREFIX}{i:04d}" for i in range(first, min(first + per_post, vhosts))]
        api.request("POST", "/definitions", {
            "vhosts": [{"name": n} for n in names],
            "permissions": [{"user": "guest", "vhost": n, "configure": ".*", "write": ".*",
                             "read": ".*"} for n in names],
            "exchanges": [{"name": "news", "vhost": n, "type": "topic", "durable": True,
                           "auto_delete": False, "internal": False, "arguments": {}}
                          for n in names],
            "queues": [{"name": f"q{j}", "vhost": n, "durable": True, "auto_delete": False,
                        "arguments": {}} for n in names for j in range(queues)],
        })


def cpu_share(pid: int, window: float) -> float:
    """The process's CPU over `window` seconds, in percent of one core."""
    before, start = cpu_seconds(pid), time.monotonic()
    time.sleep(window)
    return 100 * (cpu_seconds(pid) - before) / (time.monotonic() - start)


def publish_lag(api: RabbitMQApi) -> float:
    vhost = f"{PREFIX}0000"
    started = time.monotonic()
    for _ in range(7):
        api.request("POST", f"/exchanges/{vhost}/amq.default/publish", {
            "properties": {}, "routing_key": "q0", "payload": "x", "payload_encoding": "string"})
    while time.monotonic() - started < 300:
        stats = api.request("GET", f"/queues/{vhost}/q0").get("message_stats") or {}
        if stats.get("publish") == 7:
            return time.monotonic() - started
        time.sleep(0.5)
    return float("inf")


if __name__ == "__main__":
    main()
