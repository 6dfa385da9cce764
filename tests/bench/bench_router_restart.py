"""Router restart figures (printed, not asserted): from a restart until clients of a space
send again, every address is Active again, and creates made meanwhile are Active.

Starts a router of its own on free ports (`--router embedded`, with a state directory as `make
run` gives it, so its configuration journal brings it back; `--no-journal` without one, back
empty; or `--router qdrouterd`, which always comes back empty), the database-backed auth service
in this process (and the vhost relay for qdrouterd), a Celery worker for changes and resync, the
router watch's worker and Celery beat, on Celery queues of their own (`maas-bench-*`) and a
database of its own (`--database`, created and migrated if missing). Creates SPACES standard
address spaces with ADDRESSES addresses each (`--queues` of them queues, the rest anycast) and
one messaging user, through the service functions, and waits until all are Active. It times
`--probes` creates with nothing restarted (the fleet's steady load is in them too), then it
kills the router (SIGKILL; with `--platform`, after that, the router and the Celery processes
together: a whole-platform restart) and reports, from the moment the new router listens:

- client: the first time a messaging user of a space (the last created) round-trips a message;
- Active: every space and address Active again, once the watch has read the new run (with the
  most spaces seen not Active meanwhile);
- creates: `--probes` new anycast addresses created at `--rate` a second from then on (with
  `--platform`, from when the restarted Celery workers answer), create -> Active p50 / p99.

    .venv/bin/python tests/bench/bench_router_restart.py --spaces 100 --addresses 100
    .venv/bin/python tests/bench/bench_router_restart.py --spaces 100 --addresses 100 --platform
    QDROUTERD=... .venv/bin/python tests/bench/bench_router_restart.py --spaces 100 \
        --addresses 100 --router qdrouterd
    .venv/bin/python tests/bench/bench_router_restart.py --spaces 1000 --addresses 100  # 100k

At the end the spaces are deleted and the script waits until the agents removed them (their
RabbitMQ vhosts too); once the platform is stopped, the vhosts and users of any space left and
the database, if the run created it, go too (tests/bench/common.py `Leftovers`). `--keep`
skips all that, for a later look. `--log FILE` keeps the platform's output.
"""
import argparse
import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import timedelta

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from django.utils import timezone  # noqa: E402

from tests.bench.common import KEEP_HELP, Leftovers  # noqa: E402
from tests.router.conftest import ADMIN_PASSWORD, RouterProcess  # noqa: E402

PASSWORD = "bench-password"


def start_platform(queue: str, concurrency: int, out) -> list[subprocess.Popen]:
    celery = [sys.executable, "-m", "celery", "-A", "maas"]
    quiet = ["--loglevel", "INFO", "--without-gossip", "--without-mingle"]
    commands = [
        [*celery, "worker", *quiet, "-Q", f"{queue},{queue}-resync", "--concurrency",
         str(concurrency), "-n", f"agents-{queue}@%h"],
        [*celery, "worker", *quiet, "-Q", f"{queue}-watch", "--concurrency", "1",
         "-n", f"watch-{queue}@%h"],
        [*celery, "beat", "--loglevel", "INFO", "--schedule", f"/tmp/{queue}-beat"],
    ]
    return [subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True) for cmd in commands]


def stop_platform(procs) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
    for proc in procs:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)


def not_active(space_uids, why: dict | None = None) -> int:
    """Spaces and addresses whose status is not Active, as the API derives it; `why` counts
    their status messages."""
    from config_service.models import Address, AddressSpace
    from config_service.status import address_status, agent_states, space_status

    spaces = {s.pk: s for s in AddressSpace.objects.filter(uid__in=space_uids)}
    states = agent_states(space_uids)
    statuses = [space_status(s, states.get(s.uid, {})) for s in spaces.values()]
    for address in Address.objects.filter(space_id__in=list(spaces)):
        space = spaces[address.space_id]
        statuses.append(address_status(space, address, states.get(space.uid, {})))
    waiting = [s for s in statuses if s.phase != "Active"]
    if why is not None:
        for status in waiting:
            key = f"{status.phase}: {'; '.join(status.messages)[:120]}"
            why[key] = why.get(key, 0) + 1
    return len(waiting)


def wait_until(predicate, timeout: float, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(interval)
    raise SystemExit(f"timed out after {timeout} s")


def round_trip(router, space) -> bool:
    from proton import Message
    from proton.utils import BlockingConnection

    from tests.router.conftest import pump_until

    def connect():
        return BlockingConnection(f"amqp://127.0.0.1:{router.amqp_port}",
                                  user=f"app@{space.vhost}", password=PASSWORD,
                                  allowed_mechs="PLAIN", allow_insecure_mechs=True, timeout=5,
                                  virtual_host=space.vhost)

    cr, cs = connect(), connect()
    try:
        receiver = cr.create_receiver("a0", credit=1)
        sender = cs.create_sender("a0")
        pump_until(lambda: sender.link.credit > 0, cs, cr)
        sender.link.send(Message(body="ping"))
        pump_until(lambda: len(receiver.fetcher.incoming) == 1, cs, cr)
        return receiver.receive(5).body == "ping"
    finally:
        cs.close()
        cr.close()


def probe_creates(services, ctx, spaces, count: int, rate: float, created: dict,
                  prefix: str) -> None:
    """Creates `count` anycast addresses round-robin over `spaces`, `rate` a second, recording
    when each was accepted."""
    from django.db import connection

    began = time.monotonic()
    try:
        for i in range(count):
            time.sleep(max(0.0, began + i / rate - time.monotonic()))
            space = spaces[i % len(spaces)]
            address = services.create_address(ctx=ctx, space=space, address=f"{prefix}{i}",
                                              type="anycast", plan="standard-small-anycast")
            created[address.pk] = (space, time.monotonic())
    finally:
        connection.close()


def active_probes(created: dict, active_at: dict) -> None:
    """Records when each created probe address is first seen Active."""
    from config_service.models import Address
    from config_service.status import address_status, agent_states

    waiting = {pk: entry for pk, entry in list(created.items()) if pk not in active_at}
    if not waiting:
        return
    states = agent_states(list({space.uid for space, _ in waiting.values()}))
    now = time.monotonic()
    for address in Address.objects.filter(pk__in=list(waiting)):
        space = waiting[address.pk][0]
        if address_status(space, address, states.get(space.uid, {})).phase == "Active":
            active_at[address.pk] = now


def workers_answer(queue: str) -> bool:
    from maas.celery import app

    host = socket.gethostname()
    names = {f"agents-{queue}@{host}", f"watch-{queue}@{host}"}
    replies = app.control.ping(destination=list(names), timeout=0.5)
    return names <= {name for reply in replies for name in reply}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def start_router(kind: str, auth_port: int, journal: str | None):
    if kind == "qdrouterd":
        from tests.qdrouterd import QdrouterdProcess

        router = QdrouterdProcess(auth_port)
    else:
        router = RouterProcess(["--state-dir", journal] if journal else [], auth_port=auth_port)
    router.start()
    return router


def kill(router) -> None:
    router.proc.kill()
    router.proc.wait()
    router.proc = None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--spaces", type=int, default=100)
    parser.add_argument("--addresses", type=int, default=10)
    parser.add_argument("--queues", type=int, default=2, help="of the addresses, queues")
    parser.add_argument("--router", choices=("embedded", "qdrouterd"), default="embedded")
    parser.add_argument("--no-journal", action="store_true",
                        help="the embedded router without a state directory: back empty")
    parser.add_argument("--platform", action="store_true",
                        help="then restart the Celery processes with the router too")
    parser.add_argument("--down", type=float, default=0.0,
                        help="seconds the router stays down (as a big journal keeps it)")
    parser.add_argument("--probes", type=int, default=200, help="creates from the restart on")
    parser.add_argument("--rate", type=float, default=20.0, help="probe creates a second")
    parser.add_argument("--database", default="maas_bench_router_restart")
    parser.add_argument("--concurrency", type=int, default=4, help="change worker processes")
    parser.add_argument("--keep", action="store_true",
                        help="do not delete the spaces; " + KEEP_HELP)
    parser.add_argument("--log", help="write the platform's output here")
    args = parser.parse_args()
    # SIGTERM (a timeout, a kill) unwinds like an error: the spaces, their vhosts and the
    # processes are still removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    queue = f"maas-bench-{uuid.uuid4().hex[:6]}"
    leftovers = Leftovers()
    os.environ.update({
        "DATABASE_URL": leftovers.ensure_database(args.database), "MAAS_CELERY_QUEUE": queue,
        "DJANGO_SETTINGS_MODULE": "maas.settings",
        # the platform's processes log at INFO into --log; without one, only warnings
        "MAAS_LOG_LEVEL": "INFO" if args.log else "WARNING",
        "MAAS_ROUTER_ADMIN_USER": "admin", "MAAS_ROUTER_ADMIN_PASSWORD": ADMIN_PASSWORD,
    })
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from config_service import services
    from config_service.models import AddressSpace, AgentState, RouterIncarnation
    from core.context import Context
    from tenants import default_plans
    from tenants.models import AddressPlan, AddressSpacePlan, TenantQuota
    from tenants.services import create_tenant
    from tests.qdrouterd import AuthService, VhostRelay
    from workers import dispatch

    auth = AuthService()  # reads messaging users from the bench's database
    relay = None
    if args.router == "qdrouterd":
        relay = VhostRelay()
        os.environ["MAAS_VHOST_RELAY_PORT"] = str(relay.port)
    journal = None
    if args.router == "embedded" and not args.no_journal:
        journal = tempfile.mkdtemp(prefix="bench-router-state-")
    router = start_router(args.router, auth.port, journal)
    os.environ.update({"MAAS_ROUTER_MANAGEMENT_URL": f"amqp://127.0.0.1:{router.mgmt_port}",
                       "MAAS_ROUTER_AMQP_PORT": str(router.amqp_port)})
    settings.MAAS_ROUTER_MANAGEMENT_URL = os.environ["MAAS_ROUTER_MANAGEMENT_URL"]
    settings.MAAS_ROUTER_AMQP_PORT = router.amqp_port

    out = open(args.log, "w") if args.log else subprocess.DEVNULL  # noqa: SIM115
    platform = start_platform(queue, args.concurrency, out)
    spaces = []
    try:
        default_plans.install(AddressPlan, AddressSpacePlan)
        ctx = Context(actor="bench")
        slug = f"bench-{uuid.uuid4().hex[:6]}"
        owner = get_user_model().objects.create_user(username=slug, password=None)
        tenant = create_tenant(ctx=ctx, slug=slug, owner=owner)
        TenantQuota.objects.filter(tenant=tenant).update(
            max_address_spaces=None, max_addresses=None, max_messaging_users=None)
        began = time.monotonic()
        for s in range(args.spaces):
            space = services.create_address_space(ctx=ctx, tenant=tenant, name=f"s{s}",
                                                  type="standard", plan="standard-unlimited")
            for a in range(args.addresses):
                queue_address = a >= args.addresses - args.queues
                services.create_address(
                    ctx=ctx, space=space, address=f"{'q' if queue_address else 'a'}{a}",
                    type="queue" if queue_address else "anycast",
                    plan="standard-small-queue" if queue_address else "standard-small-anycast")
            services.create_messaging_user(
                ctx=ctx, space=space, username="app",
                authentication={"type": "password",
                                "password": base64.b64encode(PASSWORD.encode()).decode()},
                authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
            spaces.append(space)
        uids = [s.uid for s in spaces]
        total = args.spaces * args.addresses
        print(f"{args.router} router{' without its journal' if args.no_journal else ''}: "
              f"{args.spaces} spaces x {args.addresses} addresses ({args.queues} queues), "
              f"{total} addresses, created in {time.monotonic() - began:.1f} s")
        # each look derives the status of every address: at 100k, seconds of a core
        done = wait_until(lambda: not_active(uids) == 0, 120 + total / 5,
                          2.0 if total < 20_000 else 15.0)
        print(f"all Active {done - began:.1f} s after the first create")
        key = f"amqp://127.0.0.1:{router.mgmt_port}"
        wait_until(lambda: RouterIncarnation.objects.filter(management_url=key).exists(), 30)

        # The same creates with nothing restarted: what the fleet's steady load (drift checks,
        # the sampler) costs them, beside what a restart adds.
        created, active_at = {}, {}
        creator = threading.Thread(target=probe_creates, daemon=True, args=(
            services, ctx, spaces, args.probes, args.rate, created, "base-"))
        creator.start()
        wait_until(lambda: (active_probes(created, active_at), not creator.is_alive()
                            and len(active_at) == len(created))[1], 600, 0.1)
        latencies = [active_at[pk] - at for pk, (_, at) in created.items()]
        print(f"-- nothing restarted: {len(created)} creates at {args.rate:g}/s: create -> "
              f"Active p50 {percentile(latencies, 0.5) * 1000:.0f} ms, "
              f"p99 {percentile(latencies, 0.99) * 1000:.0f} ms")
        rounds = [False, True] if args.platform else [False]
        for round_, whole in enumerate(rounds):
            killed = time.monotonic()
            kill(router)
            if whole:
                stop_platform(platform)
            time.sleep(max(0.0, killed + args.down - time.monotonic()))
            router.start()  # same ports (and state directory): listening means restored, if at all
            listening = time.monotonic()
            if whole:
                platform = start_platform(queue, args.concurrency, out)
            sample = spaces[-1]
            client_at = None
            while client_at is None and time.monotonic() < listening + 3600:
                try:
                    if round_trip(router, sample):
                        client_at = time.monotonic()
                except Exception:  # noqa: BLE001 - refused until the space is restored
                    time.sleep(0.05)
            if whole:
                # The web would not take a create before it has started either: the probes begin
                # once both workers answer.
                wait_until(lambda: workers_answer(queue), 120, 0.1)
                print(f"the Celery workers answered {time.monotonic() - listening:.2f} s "
                      f"after the router listened")
            created, active_at = {}, {}
            creator = threading.Thread(target=probe_creates, daemon=True, args=(
                services, ctx, spaces, args.probes, args.rate, created, f"p{round_}-"))
            creator.start()
            restored_at = None
            most_restoring = 0
            deadline = listening + 3600
            while time.monotonic() < deadline:
                if restored_at is None:
                    restoring = AgentState.objects.filter(
                        kind="router", space_uid__in=uids).exclude(invalidated="").count()
                    most_restoring = max(most_restoring, restoring)
                    watched = RouterIncarnation.objects.filter(
                        management_url=key, checked_at__gt=timezone.now() - timedelta(
                            seconds=time.monotonic() - listening)).exists()
                    if watched and restoring == 0:
                        restored_at = time.monotonic()
                active_probes(created, active_at)
                if (restored_at and not creator.is_alive()
                        and len(active_at) == len(created)):
                    break
                time.sleep(0.1)
            else:
                raise SystemExit("not restored within an hour")
            why: dict = {}
            if (left := not_active(uids, why)) > 0:  # e.g. drift checks that met no router
                print(f"{left} spaces and addresses not Active at the end: {why}")
                settled = wait_until(lambda: not_active(uids) == 0, 600, 1.0)
                print(f"... all Active {settled - listening:.2f} s after the router listened")
            latencies = [active_at[pk] - at for pk, (_, at) in created.items()]
            checked = [round_trip(router, s) for s in spaces[:: max(1, len(spaces) // 5)]]
            what = "router SIGKILLed, Celery processes restarted" if whole else "router SIGKILLed"
            print(f"-- {what}; the router listened again {listening - killed:.2f} s later")
            print(f"a messaging user round-tripped a message {client_at - listening:.2f} s after "
                  f"the router listened")
            print(f"every space and address Active (the watch read the new run) "
                  f"{restored_at - listening:.2f} s after; spaces not Active at most: "
                  f"{most_restoring}")
            print(f"{len(created)} creates at {args.rate:g}/s from then on: create -> Active "
                  f"p50 {percentile(latencies, 0.5) * 1000:.0f} ms, "
                  f"p99 {percentile(latencies, 0.99) * 1000:.0f} ms")
            slowest = sorted(((active_at[pk] - at, at - listening)
                              for pk, (_, at) in created.items()), reverse=True)[:3]
            print("  the slowest: " + ", ".join(f"{lat * 1000:.0f} ms (made {when:.2f} s after "
                                                f"the router listened)" for lat, when in slowest))
            print(f"messaging users round-tripped a message after it: {sum(checked)}/{len(checked)}")
            row = RouterIncarnation.objects.get(management_url=key)
            print(f"watch recorded restarts (configuration lost): {row.restarts}")
    finally:
        if not args.keep and spaces:
            for space in spaces:
                services.delete_address_space(ctx=ctx, space=space)
            try:
                wait_until(lambda: not AddressSpace.objects.filter(
                    uid__in=[s.uid for s in spaces]).exists(), 120 + len(spaces) * 2, 0.5)
            except SystemExit:
                print("spaces not removed in time: delete them by hand")
        stop_platform(platform)
        router.stop()
        if relay is not None:
            relay.stop()
        auth.stop()
        if journal:
            shutil.rmtree(journal, ignore_errors=True)
        client = dispatch._redis()
        for name in (queue, f"{queue}-resync", f"{queue}-usage", f"{queue}-watch"):
            client.delete(name)
        leftovers.clean_up(keep=args.keep)


if __name__ == "__main__":
    main()
