"""Faults under load (issue 16): what each fault lost, which must be zeros, and the time the
platform took to converge again. Printed, not asserted; `make test` runs a small version
(tests/workers/test_fault_convergence.py).

Starts a platform of its own: a database (`--database`, created and migrated if missing), a
redis-server and an embedded router on free ports, the auth service the router relays SASL to,
and the agents' Celery worker, the router watch's worker and Celery beat on Celery queues of
their own. Fills it with `manage.py fill_addresses --prefix faults` (per tenant, `--standard`
standard and `--brokered` brokered spaces of 100 addresses), gives each standard space a
messaging user, and waits until every address is Active. Then, with creates flowing
(`--rate` per second, over the standard spaces), it applies in turn:

1. SIGKILL of the agents' worker, restarted after `--down` seconds;
2. SIGKILL of the router, restarted empty on the same ports;
3. a restart of Redis, empty (the queued tasks are gone);
4. SIGKILL of the router and every Celery process, all started again with another secret key
   (`var/` lost: the internal credentials no longer decrypt and are replaced, docs/security.md);
5. only with `--rabbitmq`, as RabbitMQ is shared on this machine: `rabbitmqctl stop_app`, then
   `start_app`.

Before each fault `--messages` acknowledged messages go through the router to `queue0` of every
standard space. After each it prints the time to converge (every change accepted until the
component came back applied by each agent its space needs, every space and address of then
Active); then it pauses the creates until everything is applied and prints what was lost:
config changes (AppliedEvent rows short of events x agent kinds; accepted creates missing from
the projections), router entities and broker queues differing from the projections, and
acknowledged messages not received back. A platform process that exits on its own is
restarted, as Kubernetes would (`runplatform` would stop the platform), and named.

    .venv/bin/python tests/bench/bench_faults.py                 # 2 tenants: 2,000 addresses
    .venv/bin/python tests/bench/bench_faults.py --tenants 10 --rabbitmq
    .venv/bin/python tests/bench/bench_faults.py --tenants 100 --jobs 2 --brokers 4 \
        --sample 100 --timeout 2400 --rabbitmq --rabbitmq-node maas1@localhost --keep  # 100k

`--brokers N` spreads the spaces over N local RabbitMQ nodes, as `bench_scale.py --brokers`
does; `--sample K` sends and checks the messages through K of the standard spaces, spread over
them all (at 800 spaces a round of messages through each takes minutes).

At the end the spaces are deleted and the script waits until the agents removed them; once the
platform is stopped, whatever is left goes too (tests/bench/common.py `Leftovers`): the vhosts
and users of the database's spaces, the RabbitMQ nodes --brokers started (not those running
before) and the database if the run created it. `--keep` skips all that, for a later look.
`--log FILE` keeps the platform's output.
"""
import argparse
import base64
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tests.bench.common import KEEP_HELP, Leftovers, keep_vacuumed  # noqa: E402
from tests.router.conftest import ADMIN_PASSWORD, RouterProcess, free_port  # noqa: E402

PREFIX = "faults"
PASSWORD = "bench-password"
QUEUE = "queue0"  # a queue address of every standard space fill_addresses makes


class Platform:
    """The Celery processes of the bench's platform; the agents' worker can be killed alone."""

    def __init__(self, queue: str, concurrency: int, out):
        celery = [sys.executable, "-m", "celery", "-A", "maas"]
        quiet = ["--loglevel", "INFO", "--without-gossip", "--without-mingle"]
        self.commands = {
            "agents": [*celery, "worker", *quiet, "-Q", f"{queue},{queue}-resync",
                       "--concurrency", str(concurrency), "-n", f"agents-{queue}@%h"],
            "watch": [*celery, "worker", *quiet, "-Q", f"{queue}-watch", "--concurrency", "1",
                      "-n", f"watch-{queue}@%h"],
            "beat": [*celery, "beat", "--loglevel", "INFO", "--schedule", f"/tmp/{queue}-beat"],
        }
        self.out, self.procs = out, {}

    def start(self, name: str | None = None) -> None:
        for key in [name] if name else self.commands:
            self.procs[key] = subprocess.Popen(
                self.commands[key], cwd=ROOT, stdout=self.out, stderr=subprocess.STDOUT,
                start_new_session=True, env=dict(os.environ, MAAS_LOG_LEVEL="INFO"))

    def kill(self, name: str) -> None:
        """SIGKILL to the whole process group: no task gets to finish or acknowledge."""
        os.killpg(self.procs[name].pid, signal.SIGKILL)
        self.procs[name].wait()

    def revive(self) -> list[str]:
        """Restarts the processes that exited on their own, as Kubernetes would (`runplatform`
        stops everything instead); "name (exit code)" of each."""
        died = [f"{name} (exit {proc.returncode})" for name, proc in self.procs.items()
                if proc.poll() is not None]
        for name in [d.split()[0] for d in died]:
            self.start(name)
        return died

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


class Creates(threading.Thread):
    """Creates arriving through the service functions at `rate` per second, round robin over
    the spaces, queues and anycast in turn; `pause()` holds them."""

    def __init__(self, spaces, rate: float):
        super().__init__(daemon=True)
        self.spaces, self.interval = spaces, 1.0 / rate
        self.run_id = uuid.uuid4().hex[:4]
        self.created: list[tuple] = []  # (space uid, address): the service function returned
        self.errors: list[str] = []
        self.halt, self.resumed, self.idle = threading.Event(), threading.Event(), threading.Event()
        self.resumed.set()

    def run(self):
        from django.db import connection

        from config_service import services
        from core.context import Context

        ctx = Context(actor="bench:faults")
        n = 0
        while not self.halt.is_set():
            if not self.resumed.is_set():
                self.idle.set()
                self.resumed.wait(1)
                continue
            self.idle.clear()
            space, type_ = self.spaces[n % len(self.spaces)], ("anycast", "queue")[n % 2]
            name = f"live-{self.run_id}-{n}"
            try:
                services.create_address(ctx=ctx, space=space, address=name, type=type_,
                                        plan=f"standard-small-{type_}")
                self.created.append((space.uid, name))
            except Exception as exc:  # counted and printed: a refused create is no loss
                self.errors.append(f"{name}: {exc}")
            n += 1
            self.halt.wait(self.interval)
        connection.close()

    def pause(self) -> None:
        self.resumed.clear()
        self.idle.wait(10)

    def resume(self) -> None:
        self.idle.clear()  # so that the next pause() waits for the thread again
        self.resumed.set()

    def stop(self) -> None:
        self.halt.set()
        self.resumed.set()
        self.join(30)


def our_spaces():
    from config_service.models import AddressSpace

    return list(AddressSpace.objects.filter(tenant__slug__startswith=f"{PREFIX}-")
                .select_related("tenant").order_by("tenant__slug", "name"))


def not_yet(uids, upto_position: int | None = None, upto_time=None) -> dict:
    """What is not converged of the spaces `uids`, counting only changes accepted up to then
    (event position, creation time; None: everything): spaces and addresses not Active, and
    AppliedEvent rows and outbox acknowledgements missing."""
    from django.db.models import Count

    from config_service.models import Address, AddressSpace, AppliedEvent
    from config_service.status import address_status, agent_states, agents_needed, space_status
    from eventlog.models import ConfigEvent, Outbox

    spaces = {s.pk: s for s in AddressSpace.objects.filter(uid__in=uids)}
    states = agent_states(uids)
    addresses = Address.objects.filter(space_id__in=list(spaces))
    events = ConfigEvent.objects.filter(stream_id__in=uids)
    applied = AppliedEvent.objects.filter(event__stream_id__in=uids)
    outbox = Outbox.objects.filter(stream_uid__in=uids, acked_at__isnull=True)
    if upto_time is not None:
        addresses = addresses.filter(created_at__lte=upto_time)
    if upto_position is not None:
        events = events.filter(position__lte=upto_position)
        applied = applied.filter(event__position__lte=upto_position)
        outbox = outbox.filter(event_id__lte=upto_position)
    inactive = sum(space_status(s, states.get(s.uid, {})).phase != "Active"
                   for s in spaces.values())
    for a in addresses.only("space_id", "name", "type", "scheduled", "pending_reason",
                            "resource_version").iterator(chunk_size=5000):
        space = spaces[a.space_id]
        inactive += address_status(space, a, states.get(space.uid, {})).phase != "Active"
    kinds = {s.uid: len(agents_needed(s.type)) for s in spaces.values()}
    expected = sum(kinds.get(row["stream_id"], 0) * row["n"]
                   for row in events.values("stream_id").annotate(n=Count("position")))
    return {"not Active": inactive, "AppliedEvent missing": expected - applied.count(),
            "outbox unacknowledged": outbox.count()}


def wait_converged(uids, timeout: float, platform: Platform, died: list,
                   **upto) -> tuple[float | None, dict]:
    """(the monotonic time nothing was left, or None after `timeout`; what was left last);
    platform processes that exited meanwhile are restarted and added to `died`."""
    deadline = time.monotonic() + timeout
    while True:
        died += platform.revive()
        began = time.monotonic()
        left = not_yet(uids, **upto)
        if not any(left.values()):
            return time.monotonic(), left
        if time.monotonic() > deadline:
            return None, left
        # At 100k a look takes seconds of this process's CPU, which the platform needs more
        time.sleep(max(0.5, 2 * (time.monotonic() - began)))


def lost_changes(uids, created) -> dict:
    """Config changes lost: AppliedEvent rows short of events x the agent kinds each needs, and
    creates the service functions accepted that the projections lack."""
    from config_service.models import Address

    have = set(Address.objects.filter(space__uid__in=uids).values_list("space__uid", "address"))
    return {"AppliedEvent missing": not_yet(uids)["AppliedEvent missing"],
            "accepted creates missing": len(set(created) - have)}


def data_plane_differences(router_port: int, spaces) -> tuple[int, int]:
    """(router entities, broker queues) differing from the projections, over all the spaces."""
    from tests.workers.test_fault_convergence import broker_difference, router_difference
    from workers.clients.qdr import Management

    mgmt = Management(f"amqp://127.0.0.1:{router_port}", "admin", ADMIN_PASSWORD)
    try:
        routed = sum(len(router_difference(mgmt, s)) for s in spaces if s.type == "standard")
    finally:
        mgmt.close()
    return routed, sum(len(broker_difference(s)) for s in spaces)


def connect(router, space):
    return router.connect(f"app@{space.vhost}", PASSWORD, vhost=space.vhost)


def send_batch(router, spaces, label: str, n: int) -> dict:
    """{space uid: bodies} of `n` messages per space to QUEUE, each accepted by the broker."""
    from proton import Message

    sent = {}
    for space in spaces:
        conn = connect(router, space)
        try:
            sender = conn.create_sender(QUEUE)
            sent[space.uid] = [f"{label}-{i}" for i in range(n)]
            for body in sent[space.uid]:
                sender.send(Message(body=body, durable=True))  # raises unless accepted
        finally:
            conn.close()
    return sent


def receive_batch(router, spaces, sent: dict) -> tuple[int, int, int]:
    """(acknowledged messages not received back, received twice, received but never sent)."""
    from proton import Timeout

    lost = twice = foreign = 0
    for space in spaces:
        conn = connect(router, space)
        bodies: list = []
        try:
            receiver = conn.create_receiver(QUEUE, credit=len(sent[space.uid]) + 10)
            while True:  # long for what was sent, briefly for anything more
                try:
                    wait = 10.0 if len(bodies) < len(sent[space.uid]) else 0.5
                    bodies.append(receiver.receive(wait).body)
                except Timeout:
                    break
                receiver.accept()
        finally:
            conn.close()
        lost += len(set(sent[space.uid]) - set(bodies))
        twice += len(bodies) - len(set(bodies))
        foreign += len(set(bodies) - set(sent[space.uid]))
    return lost, twice, foreign


def rabbitmqctl(node: str | None, *args) -> None:
    subprocess.run(["rabbitmqctl", *(["-n", node] if node else []), *args], check=True,
                   capture_output=True, timeout=300)


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tenants", type=int, default=2)
    parser.add_argument("--standard", type=int, default=8, help="standard spaces per tenant")
    parser.add_argument("--brokered", type=int, default=2, help="brokered spaces per tenant")
    parser.add_argument("--rate", type=float, default=4.0, help="creates per second meanwhile")
    parser.add_argument("--messages", type=int, default=20, help="per standard space and fault")
    parser.add_argument("--sample", type=int, default=0,
                        help="standard spaces the messages go through (0: all)")
    parser.add_argument("--down", type=float, default=2.0, help="seconds a component is down")
    parser.add_argument("--timeout", type=float, default=600.0, help="to converge, per fault")
    parser.add_argument("--rabbitmq", action="store_true",
                        help="restart RabbitMQ too (it is shared: off by default)")
    parser.add_argument("--rabbitmq-node", help="the node rabbitmqctl restarts (-n)")
    parser.add_argument("--database", default="maas_bench_faults")
    parser.add_argument("--jobs", type=int, default=1, help="fill_addresses processes")
    parser.add_argument("--brokers", type=int, default=0,
                        help="spread the spaces over this many local RabbitMQ nodes "
                             "(MAAS_RABBITMQ_NODES; deploy/local/rabbitmq-nodes.sh)")
    parser.add_argument("--concurrency", type=int, default=4, help="agents' worker processes")
    parser.add_argument("--keep", action="store_true",
                        help="do not delete the spaces; " + KEEP_HELP)
    parser.add_argument("--log", help="write the platform's output here")
    return parser.parse_args()


def fill(args, platform: Platform, router) -> tuple[list, list]:
    """(spaces, standard ones) of the faults-* tenants, filled, each standard one with a
    messaging user, all Active, `QUEUE` empty."""
    from config_service import services
    from core.context import Context
    from workers import endpoints
    from workers.agents.storage.agent import management_api

    began = time.monotonic()
    subprocess.run([sys.executable, "manage.py", "fill_addresses", "--prefix", PREFIX,
                    "--tenants", str(args.tenants), "--standard", str(args.standard),
                    "--brokered", str(args.brokered), "--jobs", str(args.jobs)],
                   cwd=ROOT, check=True)
    spaces = our_spaces()
    standard = [s for s in spaces if s.type == "standard"]
    for space in standard:
        if not space.users.filter(username="app").exists():
            services.create_messaging_user(
                ctx=Context(actor="bench:faults"), space=space, username="app",
                authentication={"type": "password",
                                "password": base64.b64encode(PASSWORD.encode()).decode()},
                authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
    died: list[str] = []
    done, left = wait_converged([s.uid for s in spaces], args.timeout, platform, died)
    if done is None:
        raise SystemExit(f"the fill did not converge in {args.timeout:.0f} s: {left}")
    print(f"{len(spaces)} spaces ({len(standard)} standard), "
          f"{sum(s.addresses.count() for s in spaces)} addresses, all Active "
          f"{done - began:.1f} s after the fill began" + (f"; died: {died}" if died else ""))
    for space in standard:  # what an earlier run left there
        management_api(endpoints.of(space).broker).purge_queue(space.vhost, QUEUE)
    return spaces, standard


def faults(args, platform: Platform, router, redis) -> list[tuple]:
    """(what, break it, repair it) in the order they are applied."""

    def kill_router():
        router.proc.kill()
        router.proc.wait()
        router.proc = None

    def restart_rabbitmq():
        rabbitmqctl(args.rabbitmq_node, "start_app")
        rabbitmqctl(args.rabbitmq_node, "await_startup")

    def stop_all():
        kill_router()
        for name in platform.commands:
            platform.kill(name)

    def start_all_with_another_secret_key():
        from django.conf import settings

        # var/ lost: every internal credential stops decrypting. This process reads them
        # too (comparing the router with the projections), so it takes the new key as well.
        os.environ["MAAS_SECRET_KEY"] = settings.SECRET_KEY = f"bench-{uuid.uuid4().hex}"
        router.start()
        platform.start()

    chosen = [("agents' worker SIGKILLed", lambda: platform.kill("agents"),
               lambda: platform.start("agents")),
              ("router SIGKILLed, back empty", kill_router, router.start),
              ("Redis restarted empty", redis.stop, redis.start),
              ("all restarted, secret key lost", stop_all, start_all_with_another_secret_key)]
    if args.rabbitmq:
        chosen.append(("RabbitMQ restarted (stop_app, start_app)",
                       lambda: rabbitmqctl(args.rabbitmq_node, "stop_app"), restart_rabbitmq))
    return chosen


def sampled(standard, k: int) -> list:
    """`k` of the standard spaces, spread evenly over them (all when k is 0 or too big)."""
    if not k or k >= len(standard):
        return standard
    return [standard[i * len(standard) // k] for i in range(k)]


def apply(args, number: int, fault: tuple, platform: Platform, router, creates: Creates,
          spaces, standard) -> tuple:
    """Applies one fault with creates flowing, prints what it lost; its row of the summary."""
    from django.utils import timezone

    from eventlog.models import ConfigEvent

    what, fail, repair = fault
    uids = [s.uid for s in spaces]
    carriers = sampled(standard, args.sample)
    sent = send_batch(router, carriers, f"fault{number}", args.messages)
    time.sleep(2)  # creates flowing, reconciles under way
    failed = time.monotonic()
    fail()
    time.sleep(args.down)
    repair()
    repaired = time.monotonic()
    # Converged: every change accepted until the component was back is applied.
    upto = {"upto_position": ConfigEvent.objects.order_by("-position")
            .values_list("position", flat=True).first(), "upto_time": timezone.now()}
    died: list[str] = []
    done, left = wait_converged(uids, args.timeout, platform, died, **upto)
    creates.pause()  # an exact comparison needs a moment without changes in flight
    settled, still = wait_converged(uids, args.timeout, platform, died)
    changes = lost_changes(uids, creates.created)
    routed, queued = data_plane_differences(router.mgmt_port, our_spaces())
    lost, twice, foreign = receive_batch(router, carriers, sent)
    creates.resume()
    took = None if done is None else done - repaired
    print(f"{number}. {what}: down {repaired - failed:.1f} s; " + (
        f"NOT converged in {args.timeout:.0f} s: {left}" if took is None else
        f"converged {took:.1f} s after the restart ({done - failed:.1f} s after the fault)"))
    if died:
        print(f"   exited on their own, restarted as a supervisor would: {died}")
    if settled is None:
        print(f"   still not converged with the creates paused: {still}")
    print(f"   config changes lost: {sum(changes.values())} ({changes})")
    print(f"   router entities differing from the projections: {routed}; "
          f"broker queues differing: {queued}")
    print(f"   acknowledged messages lost: {lost} of {len(carriers) * args.messages}"
          f" (received twice: {twice}; received but never sent: {foreign})")
    return what, took, sum(changes.values()), routed, queued, lost, len(died)


def summary(rows, creates: Creates) -> None:
    print(f"creates accepted while faulting: {len(creates.created)}, refused: "
          f"{len(creates.errors)}{' e.g. ' + creates.errors[0] if creates.errors else ''}")
    print(f"{'fault':42}{'converge s':>11}{'changes':>9}{'router':>8}{'queues':>8}"
          f"{'messages':>10}{'died':>6}")
    for what, took, changes, routed, queued, lost, died in rows:
        took = "never" if took is None else f"{took:.1f}"
        print(f"{what:42}{took:>11}{changes:>9}{routed:>8}{queued:>8}{lost:>10}{died:>6}")


def remove(spaces, platform: Platform, timeout: float) -> None:
    """Deletes the spaces and waits until the agents removed them (their vhosts too)."""
    from config_service import services
    from config_service.models import AddressSpace
    from core.context import Context

    for space in spaces:
        services.delete_address_space(ctx=Context(actor="bench:faults"), space=space)
    deadline = time.monotonic() + timeout
    while AddressSpace.objects.filter(uid__in=[s.uid for s in spaces]).exists():
        if time.monotonic() > deadline:
            raise SystemExit("the spaces were not removed in time")
        platform.revive()
        time.sleep(1)


def main():
    args = parse_args()
    queue = f"maas-bench-faults-{uuid.uuid4().hex[:6]}"
    leftovers = Leftovers()
    if args.brokers:  # the platform, fill_addresses and this process place alike
        os.environ["MAAS_RABBITMQ_NODES"] = str(args.brokers)
        leftovers.start_nodes(args.brokers)
    redis_port = free_port()
    os.environ.update({
        "DATABASE_URL": leftovers.ensure_database(args.database), "MAAS_CELERY_QUEUE": queue,
        "DJANGO_SETTINGS_MODULE": "maas.settings", "MAAS_LOG_LEVEL": "WARNING",
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "MAAS_ROUTER_ADMIN_USER": "admin", "MAAS_ROUTER_ADMIN_PASSWORD": ADMIN_PASSWORD,
    })
    import django

    django.setup()
    if keep_vacuumed(os.environ["DATABASE_URL"]):
        print("autovacuum is off on this server: VACUUM (ANALYZE) every 60 s instead")
    logging.disable(logging.WARNING)  # this process's own (a Redis down is expected here)
    from django.conf import settings

    from tests.conftest import RedisServer
    from tests.qdrouterd import AuthService

    redis = RedisServer(redis_port)
    redis.start()
    auth = AuthService()  # the database-backed one: messaging users log in through it
    router = RouterProcess(auth_port=auth.port)
    router.start()
    settings.MAAS_ROUTER_MANAGEMENT_URL = f"amqp://127.0.0.1:{router.mgmt_port}"
    settings.MAAS_ROUTER_AMQP_PORT = router.amqp_port
    os.environ.update({"MAAS_ROUTER_MANAGEMENT_URL": settings.MAAS_ROUTER_MANAGEMENT_URL,
                       "MAAS_ROUTER_AMQP_PORT": str(router.amqp_port)})
    out = open(args.log, "w") if args.log else subprocess.DEVNULL  # noqa: SIM115
    platform = Platform(queue, args.concurrency, out)
    platform.start()
    creates = None
    try:
        spaces, standard = fill(args, platform, router)
        creates = Creates(standard, args.rate)
        creates.start()
        rows = [apply(args, number, fault, platform, router, creates, spaces, standard)
                for number, fault in enumerate(faults(args, platform, router, redis), 1)]
        creates.stop()
        summary(rows, creates)
        if not args.keep:
            remove(spaces, platform, args.timeout)
    finally:
        if creates is not None:
            creates.stop()
        platform.stop()
        router.stop()
        auth.stop()
        redis.stop()
        leftovers.clean_up(keep=args.keep)


if __name__ == "__main__":
    main()
