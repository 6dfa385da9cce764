"""The connection list of a standard space at 1,000 client connections (the issue's target: the
list answers within 300 ms), on the embedded router and on qdrouterd where QDROUTERD names a
build, in one run. Printed as a table, never asserted.

Starts what it needs: a database of its own (`--database`, created and migrated if missing;
dropped at the end if the run created it, with the vhosts and users of any space left, unless
`--keep`), Celery queues of its own (deleted afterwards), the auth service (in this process,
reading that database), then per router kind the router on free ports (qdrouterd with the vhost
relay, as tests/workers/conftest.py does). A tenant gets a standard space on a plan whose
routerPolicy admits the connections from one host and one user (the operator's defaults allow
1,000 a space and 100 a user), an anycast address `orders` and a messaging user `app`, reconciled
by the real agents. A client process opens `--connections` AMQP connections as that user from
127.0.0.1 (proton transports over plain sockets in one epoll loop), each with one receiver on
`orders` (credit 1), at `--rate` a second (the embedded router admits 100 new connections a second
per source host, dataplane/admission.py).

Then, `--repeat` times each after one warm-up call:

  connect            Management() to the router and its close: TCP, SASL (the admin, through
                     the auth service), the reply and request links
  query connections  QUERY of org.apache.qpid.dispatch.connection (every row of the router,
                     the attributes workers/connections.py reads), on one open connection
  query links        the same of org.apache.qpid.dispatch.router.link (what a list reads)
  connections()      workers.connections.connections(space): the three above (both queries
                     sent at once), the filtering
                     and the Connection objects, on a management connection of its own
  API limit=N        GET .../connections/?limit=N through Django's test client (in-process, no
                     network) with a tenant owner's personal access token: what the target is for

each with its wall p50 and p95 and, per call, this process's CPU, the router's CPU (/proc's
10 ms ticks, averaged over the calls) and the garbage collector's pauses here (the start-up
heap frozen first, as maas/wsgi.py does); and, after each block, the CPU the bench, its router,
its clients and the rest of the machine used meanwhile (other runs on the same cores lengthen
the wall times).

With `--noise N` (default 1,000) the same is measured again once another space on the same
router has N connections of its own: the local router is shared by every standard space.
qdrouterd's management answers every connection of the router; the embedded router answers a
QUERY with the MaaS property `vhost` (what connections() sends) with one space's, so there the
two `query` rows (which read the whole router) grow with the noise and connections() does not.

    QDROUTERD=/opt/qdr/bin/qdrouterd .venv/bin/python tests/bench/bench_connections.py
    .venv/bin/python tests/bench/bench_connections.py --connections 1000 --noise 0 --repeat 20
"""
import argparse
import base64
import gc
import math
import os
import resource
import selectors
import socket
import sys
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from proton import Connection, Endpoint, Transport, TransportException  # noqa: E402

from tests.bench.common import (  # noqa: E402
    KEEP_HELP,
    Leftovers,
    cpu_seconds,
    delete_queues,
)

PASSWORD = "bench-connections-pw"
TARGET_MS = 300.0
PLAN = "bench-connections"


class Peer:
    """One client: AMQP over a plain non-blocking socket, through a proton Transport driven by
    hand (SASL PLAIN, open, a session, a receiver with credit 1), as tests/bench/
    bench_router_idle.py does: no reactor walking every connection at each wake-up, so that
    qdrouterd's heartbeats (an empty frame each way every 8 s a connection) cost the bench
    next to nothing beside the router it measures."""

    def __init__(self, port: int, vhost: str, address: str, name: str):
        self.conn = Connection()
        self.conn.container, self.conn.hostname = name, vhost
        self.conn.user, self.conn.password = f"app@{vhost}", PASSWORD
        self.transport = Transport()
        sasl = self.transport.sasl()
        sasl.allowed_mechs("PLAIN")
        sasl.allow_insecure_mechs = True
        self.transport.bind(self.conn)
        self.conn.open()
        session = self.conn.session()
        session.open()
        self.receiver = session.receiver(name)
        self.receiver.source.address = address
        self.receiver.open()
        self.receiver.flow(1)
        self.lost = False
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setblocking(False)
        self.flush()

    @property
    def ready(self) -> bool:
        return (not self.lost and not self.conn.state & Endpoint.REMOTE_CLOSED
                and bool(self.receiver.state & Endpoint.REMOTE_ACTIVE))

    @property
    def refused(self) -> bool:
        return self.lost or bool(self.conn.state & Endpoint.REMOTE_CLOSED) or bool(
            self.receiver.state & Endpoint.REMOTE_CLOSED)

    def readable(self) -> None:
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.lost = True
            return
        try:
            self.transport.push(data)
        except TransportException:
            self.lost = True
            return
        self.flush()

    def tick(self, now: float) -> None:
        """Heartbeats due (the router's idle timeout halved)."""
        if not self.lost:
            self.transport.tick(now)
            self.flush()

    def flush(self) -> None:
        while not self.lost and self.transport.pending() > 0:
            try:
                sent = self.sock.send(self.transport.peek(self.transport.pending()))
            except BlockingIOError:
                return  # the rest goes at the next tick
            except OSError:
                self.lost = True
                return
            self.transport.pop(sent)

    def close(self) -> None:
        self.sock.close()


def keep_clients(pipe, port: int, vhost: str, address: str, count: int, rate: float,
                 tag: str) -> None:
    """A client process: opens `count` Peers at `rate` a second, opening again any the router
    turned away (its per-host rate), and once every receiver is attached (or after a deadline)
    says (ready, retried) on `pipe`; then keeps them, heartbeats included, until told to
    stop."""
    selector = selectors.DefaultSelector()  # epoll: no select() limit of 1,024 descriptors
    peers: dict[int, Peer] = {}
    waiting, retried, told = list(range(count)), 0, False
    per_batch, every = max(1, int(rate / 4)), 0.25
    next_batch = next_tick = time.monotonic()
    deadline = next_batch + count / rate * 3 + 30
    while not (told and pipe.poll()):
        now = time.monotonic()
        if waiting and now >= next_batch:
            for i in waiting[:per_batch]:
                peer = Peer(port, vhost, address, f"{tag}-{i:05d}")
                peers[i] = peer
                selector.register(peer.sock, selectors.EVENT_READ, peer)
            waiting, next_batch = waiting[per_batch:], now + every
        for key, _ in selector.select(0.1):
            key.data.readable()
        if now >= next_tick:
            for peer in peers.values():
                peer.tick(now)
            next_tick = now + 1.0
        for i, peer in list(peers.items()):
            if peer.refused and not told:
                selector.unregister(peer.sock)
                peer.close()
                del peers[i]
                waiting.append(i)
                retried += 1
        ready = sum(peer.ready for peer in peers.values())
        if not told and (ready == count or now > deadline):
            pipe.send((ready, retried))
            told = True
    for peer in peers.values():
        peer.close()


class Fleet:
    """`count` clients of one space in a process of their own: proton's reactor, which the
    management client here uses, waits with select(), which takes no descriptor above 1,023,
    so the bench's own process keeps none of the clients' sockets."""

    def __init__(self, port: int, vhost: str, address: str, count: int, rate: float, tag: str):
        self.args = (port, vhost, address, count, rate, tag)
        self.proc = self.pipe = None

    def open(self) -> tuple[int, int]:
        """(connections with their receiver attached, attempts retried)."""
        import multiprocessing

        spawn = multiprocessing.get_context("spawn")  # no copy of Django's database connections
        self.pipe, theirs = spawn.Pipe()
        self.proc = spawn.Process(target=keep_clients, args=(theirs, *self.args), daemon=True)
        self.proc.start()
        return self.pipe.recv()

    def close(self) -> None:
        if self.proc is None:
            return
        try:
            self.pipe.send("stop")
        except OSError:
            pass
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.terminate()


def pct(times: list[float], q: float) -> float:
    """The nearest-rank q-th percentile, in ms."""
    ordered = sorted(times)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)] * 1000


def sample(fn, repeat: int, router_pid: int) -> dict:
    """`fn` once to warm, then `repeat` times: wall p50 and p95; and per call, in ms, this
    process's CPU (every thread: the auth service's too), the router's CPU, and the time
    Python's garbage collector paused this process (gc.callbacks)."""
    fn()
    walls, paused, began = [], [0.0], [0.0]

    def on_gc(phase, info):
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            paused[0] += time.perf_counter() - began[0]

    router_before, own_before = cpu_seconds(router_pid), time.process_time()
    gc.callbacks.append(on_gc)
    try:
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            walls.append(time.perf_counter() - t)
    finally:
        gc.callbacks.remove(on_gc)
    return {"p50": pct(walls, 50), "p95": pct(walls, 95),
            "own": (time.process_time() - own_before) / repeat * 1000,
            "router": (cpu_seconds(router_pid) - router_before) / repeat * 1000,
            "gc": paused[0] / repeat * 1000}


def measure(space, client, url: str, repeat: int, router_pid: int) -> list[tuple]:
    """(what, rows, figures of `sample`) of each step."""
    from workers import connections, endpoints
    from workers.clients.qdr import Management

    router = endpoints.of(space).router

    def connect():
        return Management(router.management_url, router.admin_user, router.admin_password,
                          timeout=connections.TIMEOUT_SECONDS)

    rows: list[tuple] = [("connect", "", sample(lambda: connect().close(), repeat, router_pid))]
    mgmt = connect()
    try:
        for what, entity, attributes in (
                ("query connections", connections.CONNECTION, connections.CONNECTION_ATTRIBUTES),
                ("query links", connections.LINK, connections.LINK_COUNTS)):
            n = len(mgmt.query(entity, attributes))
            rows.append((what, n, sample(lambda e=entity, a=attributes: mgmt.query(e, a),
                                         repeat, router_pid)))
    finally:
        mgmt.close()
    listed = len(connections.connections(space))
    rows.append(("connections()", listed,
                 sample(lambda: connections.connections(space), repeat, router_pid)))
    for limit in (100, 1000):
        kept = [None]  # only the last answer: twenty would grow the heap each GC scans

        def get(limit=limit, kept=kept):
            kept[0] = client.get(url, {"limit": limit})

        figures = sample(get, repeat, router_pid)
        last = kept[0]
        body = last.json() if last.status_code == 200 else {}
        total = body.get("metadata", {}).get("totalItems", f"HTTP {last.status_code}")
        rows.append((f"API limit={limit}", f"{len(body.get('items', []))} of {total}", figures))
    return rows


def plan_for(connections: int) -> str:
    """A standard plan like standard-medium whose routerPolicy admits `connections` from one
    host and one user (the operator's defaults: 1,000 a space, 100 a user)."""
    from tenants.models import AddressSpacePlan

    medium = AddressSpacePlan.objects.get(name="standard-medium")
    allowed = connections + 100
    plan, _ = AddressSpacePlan.objects.update_or_create(
        name=PLAN, defaults={
            "address_space_type": "standard", "resource_limits": medium.resource_limits,
            "router_policy": {"maxConnections": allowed, "maxConnectionsPerUser": allowed,
                              "maxConnectionsPerHost": allowed}})
    plan.address_plans.set(medium.address_plans.all())
    return plan.name


def make_space(ctx, tenant, name: str):
    from config_service import services
    from workers.agents import runner

    space = services.create_address_space(ctx=ctx, tenant=tenant, name=name, type="standard",
                                          plan=PLAN)
    services.create_address(ctx=ctx, space=space, address="orders", type="anycast",
                            plan="standard-small-anycast")
    services.create_messaging_user(
        ctx=ctx, space=space, username="app",
        authentication={"type": "password",
                        "password": base64.b64encode(PASSWORD.encode()).decode()},
        authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
    for kind in ("storage", "router"):
        runner.run(space.uid, kind)
    return space


def drop_space(ctx, space) -> None:
    from config_service import services
    from workers.agents import runner

    services.delete_address_space(ctx=ctx, space=space)
    for kind in ("storage", "router"):
        runner.run(space.uid, kind)


def run(kind: str, args, auth, tenant, client, ctx) -> list[tuple]:
    """Every row of one router kind: (router, the space's connections, the router's, what,
    rows, figures of `sample`)."""
    from django.conf import settings

    from tests.qdrouterd import QdrouterdProcess, VhostRelay
    from tests.router.conftest import ADMIN_PASSWORD, RouterProcess
    from workers.agents.router.agent import close_pooled

    relay = None
    if kind == "embedded":
        router = RouterProcess(auth_port=auth.port)
    else:
        relay = VhostRelay()
        settings.MAAS_VHOST_RELAY_PORT = relay.port
        router = QdrouterdProcess(auth.port)
    router.start()
    settings.MAAS_ROUTER_MANAGEMENT_URL = f"amqp://127.0.0.1:{router.mgmt_port}"
    settings.MAAS_ROUTER_ADMIN_USER, settings.MAAS_ROUTER_ADMIN_PASSWORD = "admin", ADMIN_PASSWORD
    settings.MAAS_ROUTER_AMQP_PORT = router.amqp_port
    rows, fleets, spaces = [], [], []
    try:
        space = make_space(ctx, tenant, f"conn-{kind[:3]}")
        spaces.append(space)
        url = f"/api/v1/tenants/{tenant.slug}/addressspaces/{space.name}/connections/"
        steps = [(space, args.connections, "mine")]
        if args.noise:
            noise = make_space(ctx, tenant, f"noise-{kind[:3]}")
            spaces.append(noise)
            steps.append((noise, args.noise, "noise"))
        total = 0
        for target, count, tag in steps:
            started = time.monotonic()
            fleet = Fleet(router.amqp_port, target.vhost, "orders", count, args.rate,
                          f"{kind[:3]}-{tag}")
            fleets.append(fleet)
            ready, retried = fleet.open()
            total += ready
            print(f"{kind}: {ready} of {count} connections with a receiver in {target.name} in "
                  f"{time.monotonic() - started:.1f} s ({retried} retried)", flush=True)
            mine = {os.getpid(): "bench", router.proc.pid: kind,
                    **{f.proc.pid: "clients" for f in fleets}}
            before, since, load = cpu_by_pid(), time.monotonic(), os.getloadavg()[0]
            for what, n, figures in measure(space, client, url, args.repeat, router.proc.pid):
                rows.append((kind, args.connections, total, what, n, figures))
                print(f"  {what:18s} {n!s:>12} " + line(figures), flush=True)
            print(f"  load average {load:.2f} before; {spent(before, mine, since)}",
                  flush=True)
            if args.profile:
                profile(client, url)
    finally:
        for fleet in fleets:
            fleet.close()
        for s in spaces:
            drop_space(ctx, s)
        close_pooled()  # the agent's kept management connections go with their router
        router.stop()
        if relay is not None:
            relay.stop()
    return rows


def profile(client, url: str) -> None:
    """cProfile of ten GETs of the full page: where the time goes, by cumulative time."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(10):
        client.get(url, {"limit": 1000})
    profiler.disable()
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(35)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--noise", type=int, default=1000,
                        help="connections of another space on the same router (0: none)")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--rate", type=float, default=80.0, help="new connections a second")
    parser.add_argument("--router", choices=("both", "embedded", "qdrouterd"), default="both")
    parser.add_argument("--profile", action="store_true",
                        help="print a cProfile of the full page after each measurement")
    parser.add_argument("--database", default="maas_bench_connections")
    parser.add_argument("--keep", action="store_true", help=KEEP_HELP)
    args = parser.parse_args()

    # The router, a child of this process, keeps a socket per connection (and qdrouterd more).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4 * (args.connections + args.noise) + 1024
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (
            wanted if hard == resource.RLIM_INFINITY else min(wanted, hard), hard))
    queue = f"maas-bench-connections-{uuid.uuid4().hex[:6]}"
    leftovers = Leftovers()
    os.environ.update(DATABASE_URL=leftovers.ensure_database(args.database),
                      DJANGO_SETTINGS_MODULE="maas.settings", MAAS_LOG_LEVEL="WARNING",
                      MAAS_CELERY_QUEUE=queue)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    from core.context import Context
    from dataplane import qdrouterd
    from maas.heap import freeze_startup_heap
    from tenants import default_plans
    from tenants.models import AddressPlan, AddressSpacePlan, PersonalAccessToken
    from tenants.services import create_tenant
    from tests.qdrouterd import AuthService

    kinds = ["embedded", "qdrouterd"] if args.router == "both" else [args.router]
    if "qdrouterd" in kinds and qdrouterd.binary() is None:
        print("qdrouterd: skipped, QDROUTERD does not name a build")
        kinds.remove("qdrouterd")
    default_plans.install(AddressPlan, AddressSpacePlan)
    plan_for(max(args.connections, args.noise))
    ctx = Context(actor="bench:connections")
    slug = f"bench-conn-{uuid.uuid4().hex[:6]}"
    owner = get_user_model().objects.create_user(username=slug)
    tenant = create_tenant(ctx=ctx, slug=slug, owner=owner)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {PersonalAccessToken.issue(owner)[1]}")
    auth = AuthService()  # reads the bench database
    freeze_startup_heap()  # as maas/wsgi.py does in each web worker
    rows = []
    try:
        for kind in kinds:
            rows += run(kind, args, auth, tenant, client, ctx)
    finally:
        auth.stop()
        delete_queues(queue)
        leftovers.clean_up(keep=args.keep)
    print(f"\n{args.repeat} times each, in ms: wall p50 and p95; per call, CPU of this process "
          f"(own), of the router, and Python's GC pauses here (gc). 'space': the space's "
          f"connections, each with one receiver; 'router': every client connection on the "
          f"router")
    print(f"{'router':10} {'space':>5} {'router':>6}  {'what':18} {'rows':>12} {'p50':>7} "
          f"{'p95':>7} {'own':>7} {'router':>7} {'gc':>6}")
    for kind, mine, total, what, n, f in rows:
        print(f"{kind:10} {mine:5d} {total:6d}  {what:18} {n!s:>12} {f['p50']:7.1f} "
              f"{f['p95']:7.1f} {f['own']:7.1f} {f['router']:7.1f} {f['gc']:6.1f}")
    api = [r for r in rows if r[3].startswith("API")]
    if api:
        worst = max(api, key=lambda r: r[5]["p95"])
        holds = all(r[5]["p95"] <= TARGET_MS for r in api)
        print(f"\ntarget {TARGET_MS:.0f} ms at {args.connections} connections (p95 of every "
              f"API row): {'holds' if holds else 'missed'}; worst p95 {worst[5]['p95']:.1f} ms "
              f"({worst[0]}, {worst[3]}, {worst[2]} connections on the router)")


def cpu_by_pid() -> dict[int, float]:
    """CPU seconds so far of every process on the machine."""
    out: dict[int, float] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            out[int(pid)] = cpu_seconds(int(pid))
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return out


def spent(before: dict[int, float], mine: dict[int, str], since: float) -> str:
    """Who had the cores since `before` (a cpu_by_pid): the bench's processes by the names in
    `mine`, every other one as `rest` (one that ended meanwhile is not counted). Other runs
    on the machine take the same cores as the router and this process."""
    used: dict[str, float] = {}
    for pid, seconds in cpu_by_pid().items():
        label = mine.get(pid, "rest")
        used[label] = used.get(label, 0.0) + seconds - before.get(pid, 0.0)
    return (", ".join(f"{k} {v:.1f} s" for k, v in sorted(used.items())) +
            f" of CPU in {time.monotonic() - since:.1f} s ({os.cpu_count()} cores)")


def line(f: dict) -> str:
    return (f"p50 {f['p50']:7.1f} ms  p95 {f['p95']:7.1f} ms  own CPU {f['own']:6.1f} ms  "
            f"router CPU {f['router']:6.1f} ms  gc {f['gc']:5.1f} ms")


if __name__ == "__main__":
    main()
