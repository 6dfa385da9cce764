"""qdrouterd 1.19's own limits at fleet size: its memory per entity the router agent makes, the
size of a space's vhost policy by its number of users, and the size and time of its management
answers (docs/scale.md, "qdrouterd at 100,000 addresses"). Prints, never asserts.

Starts the qdrouterd `QDROUTERD` names on free ports with a bare configuration (an anonymous
management listener, vhost policy on), CREATEs the entities `desired_entities` makes for
--spaces spaces of --addresses anycast addresses and --queues queues each, reading its RSS
before and after each kind, then READs and QUERYs them. Sizes are of the AMQP-encoded bodies.

    QDROUTERD=/opt/qdr/bin/qdrouterd .venv/bin/python tests/bench/bench_qdrouterd_sizes.py
    QDROUTERD=/opt/qdr/bin/qdrouterd .venv/bin/python tests/bench/bench_qdrouterd_sizes.py --spaces 100 --addresses 200
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from proton import Message

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "maas.settings")

import django  # noqa: E402

django.setup()

from tests.router.conftest import free_port, wait_port  # noqa: E402
from workers.agents.router import desired as rc  # noqa: E402
from workers.clients.qdr import Management  # noqa: E402

RULES = [{"addresses": ["orders*", "news/*"], "operations": ["send", "recv"]}]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def encoded(body) -> int:
    return len(Message(body=body).encode())


def space_entities(i: int, users: int, anycast: int, queues: int, features) -> dict:
    space = SimpleNamespace(vhost=f"bench{i:05d}", spec={})
    people = [SimpleNamespace(username=f"user{u}", authorization=RULES) for u in range(users)]
    addresses = [SimpleNamespace(name=f"a{n}", address=f"a{n}", type="anycast")
                 for n in range(anycast)]
    addresses += [SimpleNamespace(name=f"q{n}", address=f"q{n}", type="queue")
                  for n in range(queues)]
    login = rc.BrokerLogin("127.0.0.1", 1, "router", "secret")  # never reached: no broker
    return rc.desired_entities(space, addresses, people, login,
                               plan_policy={"maxConnections": 100}, features=features)[0]


def create_all(mgmt, entities: dict) -> float:
    began = time.monotonic()
    refused = [r for r in mgmt.many(("CREATE", attrs, {"type": etype, "name": name})
                                    for (etype, name), attrs in entities.items())
               if not isinstance(r, dict)]
    if refused:
        raise SystemExit(f"qdrouterd refused {len(refused)}: {refused[0]}")
    return time.monotonic() - began


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", type=int, default=50)
    parser.add_argument("--addresses", type=int, default=100, help="anycast per space")
    parser.add_argument("--queues", type=int, default=20, help="queues per space (2 autoLinks)")
    parser.add_argument("--users", type=int, default=1, help="messaging users per space")
    args = parser.parse_args()
    binary = os.environ.get("QDROUTERD")
    if not binary:
        raise SystemExit("QDROUTERD must name a qdrouterd 1.19 build")
    port = free_port()
    config = [["router", {"mode": "standalone", "id": "bench-sizes"}],
              ["policy", {"enableVhostPolicy": True, "maxConnections": 1000}],
              ["vhost", {"hostname": "$default", "allowUnknownUser": True, "groups": {
                  "$default": {"users": "*", "remoteHosts": "*", "sources": "*",
                               "targets": "*", "allowDynamicSource": True,
                               "allowAnonymousSender": True}}}],
              ["listener", {"host": "127.0.0.1", "port": str(port), "role": "normal",
                            "authenticatePeer": False, "saslMechanisms": "ANONYMOUS"}]]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "qdrouterd.json"
        path.write_text(json.dumps(config))
        router = subprocess.Popen([binary, "-c", str(path)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            wait_port(port, 30, router)
            run(args, Management(f"amqp://127.0.0.1:{port}", timeout=120), router.pid)
        finally:
            router.terminate()
            router.wait(30)


def run(args, mgmt, pid: int) -> None:
    features = rc.RouterFeatures.of(mgmt.schema())
    print(f"qdrouterd {os.environ['QDROUTERD']}: {args.spaces} spaces of {args.addresses} "
          f"anycast and {args.queues} queues, {args.users} user(s) each")
    for users in (0, 1, 10, 100, 1000):
        policy = next(a for (t, _), a in space_entities(0, users, 0, 0, features).items()
                      if t == rc.VHOST)
        print(f"  vhost policy with {users} users: {encoded(policy)} bytes encoded")
    spaces = [space_entities(i, args.users, args.addresses, args.queues, features)
              for i in range(args.spaces)]
    kinds = {}
    for entities in spaces:
        for key, attrs in entities.items():
            kinds.setdefault(key[0], {})[key] = attrs
    base = rss_kib(pid)
    print(f"  RSS at start: {base / 1024:.1f} MiB")
    for etype in (rc.VHOST, rc.ADDRESS, rc.AUTO_LINK):  # the connectors would dial out
        entities = kinds.get(etype, {})
        if not entities:
            continue
        before = rss_kib(pid)
        took = create_all(mgmt, entities)
        grew = rss_kib(pid) - before
        print(f"  {len(entities)} {etype.rsplit('.', 1)[-1]}: created in {took:.1f} s, RSS +"
              f"{grew / 1024:.1f} MiB ({grew * 1024 / len(entities):.0f} bytes each)")
    print(f"  RSS after: {rss_kib(pid) / 1024:.1f} MiB")
    for etype in (rc.ADDRESS, rc.AUTO_LINK, rc.VHOST):
        began = time.monotonic()
        first = mgmt.request("QUERY", {"attributeNames": []}, entityType=etype, count=500,
                             offset=0)
        rows = mgmt.query(etype)
        took = time.monotonic() - began
        print(f"  QUERY {etype.rsplit('.', 1)[-1]}: {len(rows)} rows in {took:.2f} s; first "
              f"answer {len(first['results'])} rows, {encoded(first) / 1024:.1f} KiB")
    name = next(iter(kinds[rc.ADDRESS]))
    began, n = time.monotonic(), 20
    for _ in range(n):
        mgmt.read(rc.ADDRESS, name)
    print(f"  READ of the first address by name: {(time.monotonic() - began) / n * 1000:.1f} ms"
          f" (a walk of the list); of the last: ", end="")
    name = list(kinds[rc.ADDRESS])[-1]
    began = time.monotonic()
    for _ in range(n):
        mgmt.read(rc.ADDRESS, name)
    print(f"{(time.monotonic() - began) / n * 1000:.1f} ms")
    vhost = next(iter(kinds[rc.VHOST]))
    began = time.monotonic()
    for _ in range(n):
        mgmt.read(rc.VHOST, vhost)
    print(f"  READ of a vhost (Python agent, {len(kinds[rc.VHOST])} vhosts): "
          f"{(time.monotonic() - began) / n * 1000:.1f} ms")
    mgmt.close()


if __name__ == "__main__":
    main()
