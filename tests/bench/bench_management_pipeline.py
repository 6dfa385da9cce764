"""Management requests one at a time against sent at once (printed, not asserted): what a
restore of many spaces costs on each router, the creates of SPACES spaces of ADDRESSES
addresses (a vhost policy, anycast addresses, and for QUEUES queues an address and two
autoLinks each), space by space, as the router watch restores them.

    .venv/bin/python tests/bench/bench_management_pipeline.py
    QDROUTERD=... .venv/bin/python tests/bench/bench_management_pipeline.py --router qdrouterd

Each round starts a router of its own (qdrouterd always comes back empty, as the embedded router
does without a state directory) and prints the wall time of both ways, and their ratio.
"""
import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tests.router.conftest import (  # noqa: E402
    ADMIN_PASSWORD,
    ADMIN_USER,
    FixedAuthService,
    RouterProcess,
)
from workers.agents.router import desired as rc  # noqa: E402
from workers.clients.qdr import Management  # noqa: E402


def space_entities(space: int, addresses: int, queues: int) -> list[tuple[str, str, dict]]:
    """(type, name, attributes) of one space, in the order the router agent creates them."""
    vhost = f"bench-{space:05d}"
    prefix = f"maas:{vhost}:"
    out = [(rc.VHOST, prefix + "vhost", {"hostname": vhost, "groups": {"user-app": {
        "users": f"app@{vhost}", "remoteHosts": "*", "targets": "*", "sources": "*"}}})]
    for a in range(addresses):
        queue = a < queues
        out.append((rc.ADDRESS, f"{prefix}address:a{a}", {
            "prefix": f"{vhost}/a{a}", "distribution": "balanced", "waypoint": queue}))
    for a in range(queues):
        for direction in ("in", "out"):
            out.append((rc.AUTO_LINK, f"{prefix}autolink:a{a}:{direction}", {
                "address": f"{vhost}/a{a}", "direction": direction,
                "containerId": "bench-no-such-broker", "externalAddress": f"a{a}"}))
    return out


def start(kind: str, auth_port: int):
    if kind == "qdrouterd":
        from tests.qdrouterd import QdrouterdProcess

        router = QdrouterdProcess(auth_port, admin_user=ADMIN_USER)
    else:
        router = RouterProcess(auth_port=auth_port)
    router.start()
    return router


def restore(router, spaces: list, pipelined: bool) -> float:
    mgmt = Management(f"amqp://127.0.0.1:{router.mgmt_port}", ADMIN_USER, ADMIN_PASSWORD)
    began = time.monotonic()
    for entities in spaces:
        if pipelined:
            answers = mgmt.many(("CREATE", attrs, {"type": etype, "name": name})
                                for etype, name, attrs in entities)
            assert not any(isinstance(a, Exception) for a in answers), answers
        else:
            for etype, name, attrs in entities:
                mgmt.create(etype, name, attrs)
    took = time.monotonic() - began
    mgmt.close()
    return took


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--router", choices=("embedded", "qdrouterd"), default="embedded")
    parser.add_argument("--spaces", type=int, default=100)
    parser.add_argument("--addresses", type=int, default=100)
    parser.add_argument("--queues", type=int, default=2)
    args = parser.parse_args()
    spaces = [space_entities(s, args.addresses, args.queues) for s in range(args.spaces)]
    total = sum(map(len, spaces))
    auth = FixedAuthService()
    took = {}
    try:
        for pipelined in (False, True):
            router = start(args.router, auth.port)
            try:
                took[pipelined] = restore(router, spaces, pipelined)
            finally:
                router.stop()
    finally:
        auth.stop()
    print(f"{args.router}: {args.spaces} spaces x {args.addresses} addresses ({args.queues} "
          f"queues), {total} entities created space by space")
    for pipelined, label in ((False, "one request at a time"), (True, "each space's at once")):
        print(f"  {label}: {took[pipelined]:.2f} s, {total / took[pipelined]:,.0f} entities/s")
    print(f"  ratio: {took[False] / took[True]:.2f}x")


if __name__ == "__main__":
    main()
