"""Router restart figures (printed, not asserted): from a restart to every space Active again.

Starts an embedded router of its own (free ports), a Celery worker for changes and resync, the
router watch's worker and Celery beat, all on Celery queues of their own (`maas-bench-*`) and a
database of its own (`--database`, created and migrated if missing). Creates SPACES standard
address spaces with ADDRESSES addresses each (`--queues` of them queues, the rest anycast) and
one messaging user, through the service functions, and waits until all are Active. Then it
restarts the router (empty) and reports, from the moment the new router listens:

- detected: the first time the status (as the API derives it) shows some space not Active;
- restored: every space and address Active again; and the watch's own log of the restore;
- that a messaging user of a few spaces authenticates and round-trips a message again.

    .venv/bin/python tests/bench/bench_router_restart.py --spaces 100 --addresses 10
    .venv/bin/python tests/bench/bench_router_restart.py --spaces 1000 --addresses 10

At the end the spaces are deleted and the script waits until the agents removed them (their
RabbitMQ vhosts too); `--keep` skips that. `--log FILE` keeps the platform's output.
"""
import argparse
import os
import subprocess
import sys
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tests.bench.common import ensure_database  # noqa: E402
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


def not_active(space_uids) -> int:
    """Spaces and addresses whose status is not Active, as the API derives it."""
    from config_service.models import Address, AddressSpace
    from config_service.status import address_status, agent_states, space_status

    spaces = {s.pk: s for s in AddressSpace.objects.filter(uid__in=space_uids)}
    states = agent_states(space_uids)
    count = sum(space_status(s, states.get(s.uid, {})).phase != "Active"
                for s in spaces.values())
    for address in Address.objects.filter(space_id__in=list(spaces)):
        space = spaces[address.space_id]
        count += address_status(space, address, states.get(space.uid, {})).phase != "Active"
    return count


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
                                  allowed_mechs="PLAIN", allow_insecure_mechs=True, timeout=5)

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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--spaces", type=int, default=100)
    parser.add_argument("--addresses", type=int, default=10)
    parser.add_argument("--queues", type=int, default=2, help="of the addresses, queues")
    parser.add_argument("--database", default="maas_bench_router_restart")
    parser.add_argument("--concurrency", type=int, default=4, help="change worker processes")
    parser.add_argument("--keep", action="store_true", help="do not delete the spaces")
    parser.add_argument("--log", help="write the platform's output here")
    args = parser.parse_args()

    router = RouterProcess()
    router.start()
    queue = f"maas-bench-{uuid.uuid4().hex[:6]}"
    os.environ.update({
        "DATABASE_URL": ensure_database(args.database), "MAAS_CELERY_QUEUE": queue,
        "DJANGO_SETTINGS_MODULE": "maas.settings",
        "MAAS_ROUTER_MANAGEMENT_URL": f"amqp://127.0.0.1:{router.mgmt_port}",
        "MAAS_ROUTER_ADMIN_USER": "admin", "MAAS_ROUTER_ADMIN_PASSWORD": ADMIN_PASSWORD,
        "MAAS_ROUTER_AMQP_PORT": str(router.amqp_port), "MAAS_LOG_LEVEL": "INFO",
    })
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from config_service import services
    from config_service.models import AddressSpace, RouterIncarnation
    from core.context import Context
    from tenants import default_plans
    from tenants.models import AddressPlan, AddressSpacePlan, TenantQuota
    from tenants.services import create_tenant
    from workers import dispatch

    out = open(args.log, "w") if args.log else subprocess.DEVNULL  # noqa: SIM115
    platform = start_platform(queue, args.concurrency, out)
    try:
        default_plans.install(AddressPlan, AddressSpacePlan)
        ctx = Context(actor="bench")
        slug = f"bench-{uuid.uuid4().hex[:6]}"
        owner = get_user_model().objects.create_user(username=slug, password=None)
        tenant = create_tenant(ctx=ctx, slug=slug, owner=owner)
        TenantQuota.objects.filter(tenant=tenant).update(
            max_address_spaces=None, max_addresses=None, max_messaging_users=None)
        began = time.monotonic()
        spaces = []
        for s in range(args.spaces):
            space = services.create_address_space(ctx=ctx, tenant=tenant, name=f"s{s}",
                                                  type="standard", plan="standard-medium")
            for a in range(args.addresses):
                queue_address = a >= args.addresses - args.queues
                services.create_address(
                    ctx=ctx, space=space, address=f"{'q' if queue_address else 'a'}{a}",
                    type="queue" if queue_address else "anycast",
                    plan="standard-small-queue" if queue_address else "standard-small-anycast")
            services.create_messaging_user(
                ctx=ctx, space=space, username="app",
                authentication={"type": "password",
                                "password": __import__("base64").b64encode(
                                    PASSWORD.encode()).decode()},
                authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
            spaces.append(space)
        uids = [s.uid for s in spaces]
        total = args.spaces * (args.addresses + 1)
        print(f"{args.spaces} spaces x {args.addresses} addresses ({args.queues} queues) "
              f"created in {time.monotonic() - began:.1f} s")
        done = wait_until(lambda: not_active(uids) == 0, 30 + args.spaces * 2, 0.5)
        print(f"all Active {done - began:.1f} s after the first create")
        key = f"amqp://127.0.0.1:{router.mgmt_port}"
        wait_until(lambda: RouterIncarnation.objects.filter(management_url=key).exists(), 30)

        router.stop()
        killed = time.monotonic()
        router.start()  # same ports, empty
        listening = time.monotonic()
        # Polled every 0.2 s: the status of every address costs CPU the restore needs.
        detected = wait_until(lambda: not_active(uids) > 0, 60, 0.2)
        while (remaining := not_active(uids)) > 0:
            if time.monotonic() - listening > 3600:
                raise SystemExit(f"{remaining} of {total} still not Active after an hour")
            time.sleep(0.2)
        restored = time.monotonic()
        checked = [round_trip(router, s) for s in spaces[:: max(1, len(spaces) // 5)]]
        print(f"router down for {listening - killed:.2f} s (stop + start)")
        print(f"restart noticed (status not Active) {detected - listening:.2f} s after the "
              f"router listened again")
        print(f"every space and address Active again {restored - listening:.2f} s after the "
              f"router listened again ({restored - killed:.2f} s after it was stopped)")
        print(f"messaging users round-tripped a message again: {sum(checked)}/{len(checked)}")
        row = RouterIncarnation.objects.get(management_url=key)
        print(f"watch recorded restarts: {row.restarts}")
        if not args.keep:
            for space in spaces:
                services.delete_address_space(ctx=ctx, space=space)
            wait_until(lambda: not AddressSpace.objects.filter(uid__in=uids).exists(),
                       60 + args.spaces * 2, 0.5)
    finally:
        stop_platform(platform)
        router.stop()
        client = dispatch._redis()
        for name in (queue, f"{queue}-resync", f"{queue}-usage", f"{queue}-watch"):
            client.delete(name)


if __name__ == "__main__":
    main()
