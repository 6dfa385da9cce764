"""The usage sampler's minute on a broker of many vhosts: each vhost's row read by a call of its
own (what `broker_counters.read_broker` does, READERS at once) against one `/vhosts` listing of
the same columns, wall time and the broker's CPU (the node's own process, by its name), median of
--repeat. Printed, never asserted (issue 66: the pool's queue p99 met the sampler's minute).

    bash deploy/local/rabbitmq-nodes.sh start 6 && bash deploy/local/rabbitmq-nodes.sh stop 5
    .venv/bin/python tests/bench/idle_vhosts.py --api http://127.0.0.1:15685/api --vhosts 250
    .venv/bin/python tests/bench/bench_vhost_rows.py --api http://127.0.0.1:15685/api \\
        --node maas5@localhost
"""
import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tests.bench.common import cpu_by_label, load  # noqa: E402
from workers.clients.rabbitmq_api import RabbitMQApi  # noqa: E402
from workers.usage import broker_counters  # noqa: E402


def timed(node: str, call) -> tuple[float, float]:
    """(wall seconds, the node's CPU seconds) of one call()."""
    before = cpu_by_label().get(f"rabbitmq {node}", 0.0)
    started = time.monotonic()
    call()
    wall = time.monotonic() - started
    return wall, cpu_by_label().get(f"rabbitmq {node}", 0.0) - before


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api", default="http://127.0.0.1:15672/api")
    parser.add_argument("--node", default="rabbit@localhost",
                        help="the node's name, to read its process's CPU")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    api = RabbitMQApi(args.api, "guest", "guest", timeout=120)
    vhosts = api.vhost_names()
    print(f"{len(vhosts)} vhosts on {args.api} ({load()})")

    def rows():
        with ThreadPoolExecutor(broker_counters.READERS) as pool:
            list(pool.map(lambda v: broker_counters._vhost_row(api, v), vhosts))

    def listing():
        api.listing("/vhosts", params={"columns": broker_counters.VHOST_COLUMNS})

    for what, call in ((f"a row per vhost ({broker_counters.READERS} at once)", rows),
                       ("one /vhosts listing of the same columns", listing)):
        runs = [timed(args.node, call) for _ in range(args.repeat)]
        print(f"{what}: wall {statistics.median(w for w, _ in runs) * 1000:.0f} ms, the "
              f"node's CPU {statistics.median(c for _, c in runs) * 1000:.0f} ms "
              f"(medians of {args.repeat}; {load()})", flush=True)
    api.close()


if __name__ == "__main__":
    main()
