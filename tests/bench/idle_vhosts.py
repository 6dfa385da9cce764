"""Other tenants' idle spaces on a broker, for the brokered probes (issue 66): vhosts of
queues made straight on the broker (each queue with its exchange and binding, as a brokered
space's), which no platform knows of, so only the broker's own cost of holding them shows; and
deleted again.

    .venv/bin/python tests/bench/idle_vhosts.py --api http://127.0.0.1:15681/api --vhosts 1000
    .venv/bin/python tests/bench/idle_vhosts.py --api http://127.0.0.1:15681/api --remove

Made vhosts are named PREFIX + a number, and only those are ever deleted. RabbitMQ 3.10 makes a
vhost more slowly the more it holds (0.1 s at 50 vhosts, 0.5 s at 300): 1,000 take about half
an hour. bench_scale.py's --idle-vhosts makes them with `ensure` and deletes them with `remove`.
"""
import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from workers.clients.rabbitmq_api import BrokerError, RabbitMQApi  # noqa: E402

PREFIX = "maas-bench-idle-"


def _name(i: int) -> str:
    return f"{PREFIX}{i:04d}"


def _definitions(queues: int) -> dict:
    names = [f"q{j}" for j in range(queues)]
    return {
        "queues": [{"name": n, "durable": True, "auto_delete": False, "arguments": {}}
                   for n in names],
        "exchanges": [{"name": n, "type": "direct", "durable": False, "auto_delete": False,
                       "internal": False, "arguments": {}} for n in names],
        "bindings": [{"source": n, "destination": n, "destination_type": "queue",
                      "routing_key": "", "arguments": {}} for n in names],
    }


def existing(api: RabbitMQApi) -> set[str]:
    return {name for name in api.vhost_names() if name.startswith(PREFIX)}


def ensure(api: RabbitMQApi, vhosts: int, queues: int, log=print) -> float:
    """The idle vhosts 0..vhosts-1 with `queues` queues each, made where missing (one at a time:
    the broker starts one vhost at a time anyway); returns the seconds it took."""
    began = time.monotonic()
    have = existing(api)
    missing = [i for i in range(vhosts) if _name(i) not in have]
    if missing:
        log(f"making {len(missing)} idle vhosts of {queues} queues ({len(have)} there)")
    puts: list[float] = []  # each vhost PUT's seconds: RabbitMQ's vhost start
    for done, i in enumerate(missing, 1):
        name = _name(i)
        started = time.monotonic()
        api.request("PUT", f"/vhosts/{name}", {"description": "bench: idle"})
        puts.append(time.monotonic() - started)
        while True:  # the PUT answers once the vhost is recorded; an import waits for its start
            try:
                if queues:
                    api.import_definitions(name, _definitions(queues))
                break
            except BrokerError as exc:
                if "not_found" not in exc.message and not exc.transient:
                    raise
                time.sleep(1)
        if done % 100 == 0:
            log(f"  {done} of {len(missing)} made, {time.monotonic() - began:.0f} s; a vhost "
                f"PUT {statistics.median(puts[-100:]):.2f} s (median of the last 100)")
    return time.monotonic() - began


def remove(api: RabbitMQApi) -> int:
    """Deletes every idle vhost (PREFIX) of the broker; returns how many."""
    names = sorted(existing(api))
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda n: api.request("DELETE", f"/vhosts/{n}", missing_ok=True), names))
    return len(names)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api", default="http://127.0.0.1:15672/api")
    parser.add_argument("--user", default="guest")
    parser.add_argument("--password", default="guest")
    parser.add_argument("--vhosts", type=int, default=1000)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--remove", action="store_true")
    args = parser.parse_args()
    api = RabbitMQApi(args.api, args.user, args.password, timeout=600)
    if args.remove:
        print(f"deleted {remove(api)} idle vhosts")
        return
    took = ensure(api, args.vhosts, args.queues, log=lambda m: print(m, flush=True))
    print(f"{args.vhosts} idle vhosts of {args.queues} queues there ({took:.0f} s)")


if __name__ == "__main__":
    main()
