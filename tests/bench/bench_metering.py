"""Usage metering under faults (issue 17): counts sent and received vs metered, per address
type, under a mixed load with one router restart (SIGKILL) and one paused router (SIGSTOP for
longer than a sampling interval). Printed as a table, not asserted; `make test` runs the exact
cases (tests/workers/test_usage_exact.py, tests/router).

Starts what it needs on free ports: a database of its own (`--database`, created and migrated if
missing; dropped at the end if the run created it, with the vhost and users of any space the run
did not delete, unless `--keep`), a redis-server, the auth service, and the router (`--router
embedded`, journalling its counters in a temporary state dir, or `--router qdrouterd`, the build
`QDROUTERD` names, with the vhost relay). One tenant gets a standard space (anycast, multicast
with two receivers, and a queue) and a brokered space (a queue, on the local RabbitMQ). For
`--minutes`, one sender per address sends `--rate` acknowledged messages a second and its
receivers take them; a sampler thread appends a sample round every `--interval` seconds; a watch
thread runs the router watch every 2 s (it restores the router after its restart). At a third
of the run the router is SIGKILLed and started again on the same ports; at two thirds it is
SIGSTOPped for 1.5 intervals. At the end the load stops, the last rounds are sampled once
RabbitMQ's statistics settled, the usage job (Spark) runs for the day(s), and per address:

  sent     messages the router or broker accepted (outcome received by the sender)
  doubt    sends whose outcome never came back (the connection dropped): counted or not
  in       metered messages_in
  got      messages the receivers took
  out      metered messages_out

A row is exact when sent <= in <= sent + doubt and out matches got within what was in flight
to receivers when a connection dropped (shown as `lost` otherwise, with the bound the docs
give: one second of traffic for the embedded router's SIGKILL, one sampling interval for
qdrouterd's).

    .venv/bin/python tests/bench/bench_metering.py                      # 10 minutes, embedded
    .venv/bin/python tests/bench/bench_metering.py --router qdrouterd --minutes 3
"""
import argparse
import base64
import datetime
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tests.bench.common import KEEP_HELP, Leftovers  # noqa: E402
from tests.router.conftest import ADMIN_PASSWORD, RouterProcess, free_port  # noqa: E402

PASSWORD = "bench-password"
ADDRESSES = {  # (space kind, address, type, receivers)
    "anycast": ("standard", "a1", "anycast", 1),
    "multicast": ("standard", "m1", "multicast", 2),
    "queue": ("standard", "q1", "queue", 1),
    "brokered queue": ("brokered", "bq", "queue", 1),
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--router", choices=("embedded", "qdrouterd"), default="embedded")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--rate", type=float, default=20.0, help="messages a second per address")
    p.add_argument("--interval", type=float, default=10.0, help="sampling interval, seconds")
    p.add_argument("--database", default="maas_bench_metering")
    p.add_argument("--keep", action="store_true", help=KEEP_HELP)
    return p.parse_args()


class Counted:
    """Counts of one address, updated by its sender and receiver threads."""

    def __init__(self):
        self.sent = self.doubt = self.got = 0
        self.lock = threading.Lock()

    def add(self, **counts) -> None:
        with self.lock:
            for key, value in counts.items():
                setattr(self, key, getattr(self, key) + value)


class Load:
    """A sender and its receivers per address, reconnecting after every fault."""

    def __init__(self, connect, rate: float):
        self.connect, self.rate = connect, rate
        self.stopping = threading.Event()
        self.receiving = threading.Event()  # cleared only once the senders stopped and drained
        self.receiving.set()
        self.counts = {name: Counted() for name in ADDRESSES}
        self.threads = []

    def start(self) -> None:
        for name, (kind, address, _, receivers) in ADDRESSES.items():
            # RabbitMQ's AMQP 1.0 address of an existing queue (docs/storage.md).
            address = address if kind == "standard" else f"/amq/queue/{address}"
            for i in range(receivers):
                self._thread(self._receive, name, address, i)
            self._thread(self._send, name, address)

    def _thread(self, target, *args) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        t.start()
        self.threads.append(t)

    def _send(self, name: str, address: str) -> None:
        from proton import Message

        counted = self.counts[name]
        n = 0
        while not self.stopping.is_set():
            try:
                conn = self.connect(name)
                sender = conn.create_sender(address)
                while not self.stopping.is_set():
                    began = time.monotonic()
                    n += 1
                    try:
                        sender.send(Message(body=f"{name} {n}"), timeout=10)
                    except Exception:
                        counted.add(doubt=1)
                        raise
                    counted.add(sent=1)
                    time.sleep(max(0.0, 1 / self.rate - (time.monotonic() - began)))
                conn.close()
            except Exception:
                time.sleep(0.5)  # a fault: reconnect

    def _receive(self, name: str, address: str, i: int) -> None:
        counted = self.counts[name]
        while self.receiving.is_set():
            try:
                conn = self.connect(name)
                # Little credit: what is in flight to a receiver when its connection drops was
                # counted by the router as sent out but never taken.
                receiver = conn.create_receiver(address, credit=5, name=f"{name}-{i}")
                while self.receiving.is_set():
                    try:
                        receiver.receive(1)
                    except Exception as exc:
                        if type(exc).__name__ == "Timeout":
                            continue
                        raise
                    counted.add(got=1)
                    try:
                        receiver.accept()
                    except IndexError:  # a pre-settled copy (the embedded router's multicast)
                        pass
                conn.close()
            except Exception:
                time.sleep(0.5)

    def stop(self) -> None:
        self.stopping.set()
        time.sleep(5)  # the receivers take what is still queued
        self.receiving.clear()
        for t in self.threads:
            t.join(15)


def every(seconds: float, stop: threading.Event, work) -> threading.Thread:
    def run():
        while not stop.wait(seconds):
            try:
                work()
            except Exception:
                logging.getLogger("bench").exception("bench.round_failed")

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def main():
    args = parse_args()
    leftovers = Leftovers()
    try:
        run(args, leftovers)
    finally:  # the spaces' vhosts and users if the run did not delete them, the database
        leftovers.clean_up(keep=args.keep)


def run(args, leftovers: Leftovers) -> None:
    redis_port = free_port()
    os.environ.update({
        "DATABASE_URL": leftovers.ensure_database(args.database),
        "DJANGO_SETTINGS_MODULE": "maas.settings",
        "MAAS_LOG_LEVEL": "WARNING", "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "MAAS_CELERY_QUEUE": f"maas-bench-metering-{uuid.uuid4().hex[:6]}",
        "MAAS_ROUTER_ADMIN_USER": "admin", "MAAS_ROUTER_ADMIN_PASSWORD": ADMIN_PASSWORD,
    })
    import django

    django.setup()
    logging.disable(logging.WARNING)
    from django.conf import settings

    from config_service import services
    from core.context import Context
    from spark.samples import write_samples
    from spark.session import get_session
    from tenants.models import AddressUsageDaily, Tenant
    from tests.conftest import RedisServer
    from tests.qdrouterd import AuthService, QdrouterdProcess, VhostRelay
    from workers.agents import runner
    from workers.agents.router import watch as router_watch
    from workers.usage import sampler
    from workers.usage.job import run_day

    ctx = Context(actor="bench:metering")
    work = tempfile.mkdtemp(prefix="bench-metering-")
    settings.MAAS_USAGE_STORE = os.path.join(work, "usage")
    redis = RedisServer(redis_port)
    redis.start()
    auth, relay = AuthService(), None
    if args.router == "qdrouterd":
        relay = VhostRelay()
        settings.MAAS_VHOST_RELAY_PORT = relay.port
        router = QdrouterdProcess(auth.port)
    else:
        router = RouterProcess(["--state-dir", os.path.join(work, "router")], auth_port=auth.port)
    router.start()
    settings.MAAS_ROUTER_MANAGEMENT_URL = f"amqp://127.0.0.1:{router.mgmt_port}"
    settings.MAAS_ROUTER_AMQP_PORT = router.amqp_port
    tenant = Tenant.objects.create(slug=f"meter-{uuid.uuid4().hex[:6]}", name="metering bench")
    spaces = {}
    for kind in ("standard", "brokered"):
        plan = "standard-small" if kind == "standard" else "brokered-single-broker"
        space = services.create_address_space(ctx=ctx, tenant=tenant, name=f"{kind[:3]}-meter",
                                              type=kind, plan=plan)
        services.create_messaging_user(
            ctx=ctx, space=space, username="app",
            authentication={"type": "password",
                            "password": base64.b64encode(PASSWORD.encode()).decode()},
            authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
        spaces[kind] = space
    for kind, address, atype, _ in ADDRESSES.values():
        plan = f"standard-small-{atype}" if kind == "standard" else f"brokered-{atype}"
        services.create_address(ctx=ctx, space=spaces[kind], address=address, type=atype,
                                plan=plan)
    for space in spaces.values():
        runner.run(space.uid, "storage")
        if space.type == "standard":
            runner.run(space.uid, "router")

    def connect(name):
        from proton.utils import BlockingConnection

        kind = ADDRESSES[name][0]
        vhost = spaces[kind].vhost
        if kind == "standard":
            return BlockingConnection(f"amqp://127.0.0.1:{router.amqp_port}",
                                      user=f"app@{vhost}", password=PASSWORD,
                                      allowed_mechs="PLAIN", allow_insecure_mechs=True,
                                      virtual_host=vhost, timeout=10)
        return BlockingConnection("amqp://127.0.0.1:5672", user=f"app@{vhost}",
                                  password=PASSWORD, allowed_mechs="PLAIN",
                                  allow_insecure_mechs=True, virtual_host=f"vhost:{vhost}",
                                  timeout=10)

    def sample_round():
        now = datetime.datetime.now(datetime.UTC)
        rows = sampler.collect(now)
        if rows:
            write_samples(rows, settings.MAAS_USAGE_STORE, now)
        days.add(now.date())

    days: set = set()
    stop = threading.Event()
    sample_round()
    every(args.interval, stop, sample_round)
    every(2.0, stop, lambda: router_watch.tick(settings.MAAS_ROUTER_MANAGEMENT_URL))
    load = Load(connect, args.rate)
    load.start()
    seconds = args.minutes * 60
    try:
        time.sleep(seconds / 3)
        print(f"{time.strftime('%X')} SIGKILL router, start again", flush=True)
        os.kill(router.proc.pid, signal.SIGKILL)
        router.proc.wait()
        router.proc = None
        router.start()
        time.sleep(seconds / 3)
        print(f"{time.strftime('%X')} SIGSTOP router for {1.5 * args.interval:.0f} s", flush=True)
        os.kill(router.proc.pid, signal.SIGSTOP)
        time.sleep(1.5 * args.interval)
        os.kill(router.proc.pid, signal.SIGCONT)
        time.sleep(seconds / 3)
    finally:
        load.stop()
        time.sleep(max(6.0, args.interval))  # RabbitMQ's statistics (5 s) settle
        stop.set()
        sample_round()
        time.sleep(1)
        sample_round()
    spark = get_session("maas-bench-metering")
    metered = {}
    for day in sorted(days):
        run_day(day, spark)
        for row in AddressUsageDaily.objects.filter(tenant=tenant, day=day):
            m = metered.setdefault((row.space, row.address), [0, 0])
            m[0] += row.messages_in
            m[1] += row.messages_out
    rate = args.rate
    print(f"\n{args.router} router, {args.minutes:g} min at {rate:g} msg/s per address, "
          f"sampling every {args.interval:g} s, one SIGKILL restart, one SIGSTOP pause")
    print(f"{'address':16} {'sent':>7} {'doubt':>6} {'in':>7} {'got':>7} {'out':>7}  verdict")
    for name, (kind, address, _, _) in ADDRESSES.items():
        c = load.counts[name]
        m_in, m_out = metered.get((spaces[kind].name, address), [0, 0])
        exact_in = c.sent <= m_in <= c.sent + c.doubt
        verdict = "exact" if exact_in and m_out == c.got else (
            f"in {m_in - c.sent:+d}, out {m_out - c.got:+d}")
        if kind == "standard" and not exact_in:
            # What the docs allow the router's SIGKILL to lose, per receiver for out.
            window = 1.0 if args.router == "embedded" else args.interval
            verdict += f" (docs: up to {rate * window:.0f} in, {window:g} s)"
        print(f"{name:16} {c.sent:7d} {c.doubt:6d} {m_in:7d} {c.got:7d} {m_out:7d}  {verdict}")
    for space in spaces.values():
        services.delete_address_space(ctx=ctx, space=space)
        runner.run(space.uid, "storage")
        if space.type == "standard":
            runner.run(space.uid, "router")
    spark.stop()
    router.stop()
    if relay is not None:
        relay.stop()
    auth.stop()
    redis.stop()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
