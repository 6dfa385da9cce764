"""Brokered metering at scale: one usage reading of a broker with thousands of queues and
exchanges, the old whole-broker listings against `broker_counters.read_broker` (printed with the
machine's load average, never asserted; docs/storage.md "Brokered metering").

Builds (or reuses) --vhosts vhosts `maas-bench-meter-NNN` on the local RabbitMQ, each with
--queues classic queues and --exchanges topic exchanges stamped like MaaS's (one definitions
import per vhost), every exchange bound to one queue and from a fanout `all`, and publishes one
message to each vhost's `all` so that every queue and exchange has message statistics. Then,
--repeat times each, medians:

- old: the five whole-broker GETs the reading made before (`/queues`, `/exchanges`, `/vhosts`,
  `/connections` with `columns`, and `/nodes`), at once;
- new: `read_broker` for every bench vhost, and for one of them (a sampler serving one space);
- with --alternatives, also the whole-broker listings in pages of 500 (`?page=N&page_size=500`):
  RabbitMQ adds statistics only to the page, but lists and sorts every object for each page.

Each line gives the slowest single call too. At the end the vhosts this run made are deleted
(`--keep` leaves them, for the next run to reuse); those an earlier run left are reused and not
deleted (`--cleanup` deletes them).

    .venv/bin/python tests/bench/bench_broker_counters.py                  # 40 x (375 + 375)
    .venv/bin/python tests/bench/bench_broker_counters.py --vhosts 40 --queues 750 --exchanges 750
    .venv/bin/python tests/bench/bench_broker_counters.py --cleanup        # deletes the vhosts
"""
import argparse
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.bench.common import load  # noqa: E402
from tests.storage.clients import API_PASSWORD, API_URL, API_USER  # noqa: E402
from workers.agents.storage.rabbitmq import RabbitMQApi  # noqa: E402
from workers.agents.storage.rabbitmq_objects import INCARNATION_ARG, INCARNATION_TAG_PREFIX  # noqa: E402
from workers.usage import broker_counters  # noqa: E402

PREFIX = "maas-bench-meter-"
OLD_TIMEOUT = 120.0  # the old read is let run to its end, to show how long it takes


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vhosts", type=int, default=40)
    p.add_argument("--queues", type=int, default=375, help="per vhost")
    p.add_argument("--exchanges", type=int, default=375, help="per vhost")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--skip-old", action="store_true", help="measure the new reading only")
    p.add_argument("--alternatives", action="store_true",
                   help="measure whole-broker paged listings too")
    p.add_argument("--cleanup", action="store_true", help="delete the bench vhosts and stop")
    p.add_argument("--keep", action="store_true",
                   help="leave the vhosts this run made, for the next run to reuse")
    return p.parse_args()


def bench_vhosts(api) -> list[str]:
    return sorted(name for name in api.vhost_names() if name.startswith(PREFIX))


def definitions(queues: int, exchanges: int, stamp: int) -> dict:
    args = {INCARNATION_ARG: stamp}
    qs = [f"q-{i:05d}" for i in range(queues)]
    xs = [f"x-{i:05d}" for i in range(exchanges)]
    return {
        "queues": [{"name": q, "durable": True, "auto_delete": False, "arguments": args}
                   for q in qs],
        "exchanges": [{"name": x, "type": "topic", "durable": True, "auto_delete": False,
                       "internal": False, "arguments": args} for x in xs]
                     + [{"name": "all", "type": "fanout", "durable": True, "auto_delete": False,
                         "internal": False, "arguments": {}}],
        "bindings": [{"source": "all", "destination": x, "destination_type": "exchange",
                      "routing_key": "", "arguments": {}} for x in xs]
                    + [{"source": x, "destination": qs[i % len(qs)], "destination_type": "queue",
                        "routing_key": "#", "arguments": {}} for i, x in enumerate(xs)],
    }


def build(api, n: int, queues: int, exchanges: int) -> list[str]:
    """The bench vhosts, made where missing or not of the asked size (their state then
    replaced), each with one message published to its `all`."""
    names = [f"{PREFIX}{i:03d}" for i in range(n)]
    have = {r["name"]: r for r in api.request(
        "GET", "/vhosts", params={"columns": "name,tags"}) or []}
    start = time.monotonic()
    for name in names:
        counts = None
        if name in have:
            counts = (len(api.list_queues(name, ("name",))),
                      len(api.list_exchanges(name, ("name",))))
        if counts == (queues, exchanges + 8):  # + `all` and RabbitMQ's seven
            continue
        if name in have:
            api.delete_vhost(name)
        stamp = int(time.time() * 1000)
        api.put_vhost(name, "bench_broker_counters", (f"{INCARNATION_TAG_PREFIX}{stamp}",))
        api.request("PUT", f"/permissions/{name}/{API_USER}",
                    {"configure": ".*", "write": ".*", "read": ".*"})
        api.import_definitions(name, definitions(queues, exchanges, stamp))
        api.request("POST", f"/exchanges/{name}/all/publish",
                    {"properties": {}, "routing_key": "k", "payload": "x" * 100,
                     "payload_encoding": "string"})
        print(f"  built {name} ({time.monotonic() - start:.0f} s)", flush=True)
    return names


def cleanup(api) -> None:
    for name in bench_vhosts(api):
        api.delete_vhost(name)
    print(f"bench vhosts left: {bench_vhosts(api)}")


def old_read(api) -> str:
    """The reading before: five whole-broker listings at once."""
    calls = [("/queues", broker_counters.QUEUE_COLUMNS),
             ("/exchanges", broker_counters.EXCHANGE_COLUMNS),
             ("/vhosts", broker_counters.VHOST_COLUMNS), ("/connections", "vhost"),
             ("/nodes", broker_counters.NODE_COLUMNS)]
    counting = Counting(api)
    with ThreadPoolExecutor(len(calls)) as pool:
        answers = list(pool.map(
            lambda c: counting.request("GET", c[0], params={"columns": c[1]}) or [], calls))
    return f"{sum(len(a) for a in answers)} rows, {counting}"


def paged_read(api) -> str:
    """The whole-broker listings in pages of 500, three listings at once."""
    counting = Counting(api)

    def listing(path, columns):
        rows, page, pages = [], 1, 1
        while page <= pages:
            answer = counting.request("GET", path, params={
                "columns": columns, "page": page, "page_size": 500})
            rows += answer["items"]
            pages, page = answer["page_count"], page + 1
        return rows

    calls = [("/queues", broker_counters.QUEUE_COLUMNS),
             ("/exchanges", broker_counters.EXCHANGE_COLUMNS),
             ("/vhosts", broker_counters.VHOST_COLUMNS)]
    with ThreadPoolExecutor(len(calls)) as pool:
        answers = list(pool.map(lambda c: listing(*c), calls))
    return f"{sum(len(a) for a in answers)} rows, {counting}"


def new_read(api, vhosts: set) -> str:
    counting = Counting(api)
    reading = broker_counters.read_broker(counting, broker_counters.EpochMemory(), vhosts)
    n = sum(len(v.queues) + len(v.exchanges) for v in reading.vhosts.values())
    return f"{len(reading.vhosts)} vhosts, {n} objects, {counting}"


def timed(label: str, fn, repeat: int) -> None:
    times, results = [], []
    for _ in range(repeat):
        start = time.monotonic()
        try:
            results.append(fn())
        except Exception as exc:  # a timed-out read is a figure too
            results.append(f"failed: {str(exc)[:80]}")
        times.append(time.monotonic() - start)
    print(f"{label}: median {statistics.median(times):.2f} s "
          f"(runs {', '.join(f'{t:.2f}' for t in times)}; {results[-1]}; {load()})", flush=True)


def main():
    args = parse_args()
    api = RabbitMQApi(API_URL, API_USER, API_PASSWORD, timeout=OLD_TIMEOUT)
    found = set(bench_vhosts(api))  # an earlier run's (--keep): reused, and left
    try:
        if args.cleanup:
            cleanup(api)
            return
        names = build(api, args.vhosts, args.queues, args.exchanges)
        totals = api.request("GET", "/overview", params={"columns": "object_totals"})
        print(f"broker: {totals['object_totals']}, {len(names)} bench vhosts "
              f"x ({args.queues} queues + {args.exchanges} exchanges); {load()}")
        time.sleep(10)  # the published messages' statistics reach the collector
        if not args.skip_old:
            timed("old: whole-broker listings", lambda: old_read(api), args.repeat)
        if args.alternatives:
            timed("whole-broker pages of 500", lambda: paged_read(api), args.repeat)
        timed(f"new: read_broker, {len(names)} vhosts", lambda: new_read(api, set(names)),
              args.repeat)
        timed("new: read_broker, 1 vhost", lambda: new_read(api, {names[0]}), args.repeat)
    finally:
        made = [] if args.cleanup else [n for n in bench_vhosts(api) if n not in found]
        if made and not args.keep:
            for name in made:
                api.delete_vhost(name)
            print(f"removed: {len(made)} vhosts this run made")
        elif made:
            print(f"kept (--keep): {len(made)} vhosts this run made")
        api.close()


class Counting:
    """The client, counting its calls and keeping the slowest (read_broker only uses `request`
    and `base_url`)."""

    def __init__(self, api):
        self.api, self.base_url = api, api.base_url
        self.calls, self.slowest = 0, 0.0
        self.lock = threading.Lock()  # read_broker calls from its threads

    def request(self, method, path, body=None, params=None, missing_ok=False, timeout=None):
        start = time.monotonic()
        try:
            return self.api.request(method, path, body, params, missing_ok, timeout)
        finally:
            with self.lock:
                self.calls += 1
                self.slowest = max(self.slowest, time.monotonic() - start)

    def __str__(self) -> str:
        return f"{self.calls} GETs, slowest {self.slowest:.2f} s"


if __name__ == "__main__":
    main()
