"""Logins of one tenant while another source attacks the login path (printed, not asserted).

The attacker, from 127.0.0.2: --idle sockets that send nothing, only the SASL header, or a
truncated AMQP header, each reopened a second after the router closes it; and --flood logins a
second of users that do not exist. The victim, from 127.0.0.3: --rate logins a second of a real
messaging user (TCP, SASL PLAIN, AMQP open and close, a bare client), for --seconds. Printed:
how many of the victim's logins succeeded, their median, p99 and slowest; the attacker's
logins answered; what the router refused at accept; the auth service's database connections
at most; the router's and the auth service's RSS.

Real processes throughout: the router (`--router embedded`, or `qdrouterd` where QDROUTERD
names a build), the auth service (`manage.py run_authservice`) on a database of the bench's
own (created and migrated if missing; dropped at the end if the run created it, unless
`--keep`), the victim's space and user made through the service functions; the vhost policy
the router agent would give the space is set over management.

    .venv/bin/python tests/bench/bench_hostile_logins.py --idle 1000 --flood 600 --seconds 30
"""
import argparse
import asyncio
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.common import KEEP_HELP, Leftovers  # noqa: E402

ATTACKER, VICTIM = "127.0.0.2", "127.0.0.3"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


# -- the attacker (a process of its own) -----------------------------------------------------------
async def _idle_socket(port: int, kind: int, stop: float) -> None:
    from dataplane.authservice import sasl

    payload = (b"", sasl.SASL_HEADER, b"AMQP")[kind]
    while time.monotonic() < stop:
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, local_addr=(ATTACKER, 0))
            writer.write(payload)
            await asyncio.wait_for(reader.read(), stop - time.monotonic())
            writer.close()
        except (OSError, TimeoutError):
            pass
        await asyncio.sleep(1.0)


async def _unknown_login(port: int, answered: list) -> None:
    from dataplane.authservice import sasl

    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port,
                                                       local_addr=(ATTACKER, 0))
    except OSError:
        return
    try:
        writer.write(sasl.SASL_HEADER)
        frames = sasl.FrameBuffer()
        name = f"nobody-{uuid.uuid4().hex[:8]}@acme.x"
        sent = False
        while True:
            data = await asyncio.wait_for(reader.read(4096), 10)
            if not data:
                return
            frames.feed(data)
            if frames.buffer[:8] == sasl.SASL_HEADER and not sent:
                frames.header()
                sent = True
                writer.write(sasl.init("PLAIN", f"\0{name}\0guess".encode()))
            frame = frames.performative(sasl.SASL_FRAME)
            while frame is not None:
                if frame.code == sasl.OUTCOME:
                    answered.append(1)
                    return
                frame = frames.performative(sasl.SASL_FRAME)
    except (OSError, TimeoutError, Exception):
        return
    finally:
        writer.close()


async def _attack(port: int, idle: int, flood: float, seconds: float) -> int:
    stop = time.monotonic() + seconds
    tasks = [asyncio.create_task(_idle_socket(port, i % 3, stop)) for i in range(idle)]
    answered: list = []
    logins: set = set()
    next_at = time.monotonic()
    while flood and time.monotonic() < stop:
        next_at += 1 / flood
        if len(logins) < 2000:
            task = asyncio.create_task(_unknown_login(port, answered))
            logins.add(task)
            task.add_done_callback(logins.discard)
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    await asyncio.sleep(max(0.0, stop - time.monotonic()))
    for task in tasks + list(logins):
        task.cancel()
    return len(answered)


def attacker(port: int, idle: int, flood: float, seconds: float, result) -> None:
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]  # a process may not raise its hard one
    wanted = 65536 if hard == resource.RLIM_INFINITY else min(65536, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    result.put(asyncio.run(_attack(port, idle, flood, seconds)))


# -- the victim -----------------------------------------------------------------------------------
def victim_login(port: int, login: str, password: str) -> None:
    from tests.bench.bench_login import bare_login

    bare_login(port, login, password, source=VICTIM, timeout=10)


def database_connections(name: str) -> int:
    import psycopg

    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres") as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                            (name,)).fetchone()[0]


def router_refusals(metrics_port: int) -> str:
    import requests

    try:
        text = requests.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
    except requests.RequestException:
        return "no metrics"
    lines = [line for line in text.splitlines()
             if line.startswith(("maas_router_connections_refused_total",
                                 "maas_router_logins_failed_total"))]
    return "; ".join(lines) or "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--router", choices=("embedded", "qdrouterd"), default="embedded")
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--flood", type=float, default=600.0, help="unknown logins a second")
    parser.add_argument("--rate", type=float, default=10.0, help="the victim's logins a second")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--database", default="maas_bench_logins")
    parser.add_argument("--auth-tls", action="store_true",
                        help="the router reaches the auth service over TLS and checks its "
                             "certificate, as make run does (default: plain)")
    parser.add_argument("--keep", action="store_true", help=KEEP_HELP)
    args = parser.parse_args()
    leftovers = Leftovers()
    url = leftovers.ensure_database(args.database)
    os.environ.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="maas.settings",
                      MAAS_LOG_LEVEL="WARNING")
    import django

    django.setup()
    from config_service import services
    from core.context import Context
    from tenants import default_plans
    from tenants.models import AddressPlan, AddressSpacePlan
    from tenants.services import create_tenant
    from tests.router.conftest import (
        ADMIN_PASSWORD,
        ADMIN_USER,
        RouterProcess,
        add_tenant,
        wait_port,
    )

    default_plans.install(AddressPlan, AddressSpacePlan)
    from django.contrib.auth import get_user_model

    ctx = Context(actor="bench:hostile-logins")
    slug = f"victim-{uuid.uuid4().hex[:6]}"
    owner = get_user_model().objects.create_user(username=slug, password=None)
    tenant = create_tenant(ctx=ctx, slug=slug, owner=owner)
    space = services.create_address_space(ctx=ctx, tenant=tenant, name="shop", type="standard",
                                          plan="standard-small")
    import base64

    services.create_messaging_user(
        ctx=ctx, space=space, username="app",
        authentication={"type": "password",
                        "password": base64.b64encode(b"app-secret-1").decode()},
        authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])

    auth_port = free_port()
    env = dict(os.environ, MAAS_ROUTER_ADMIN_USER=ADMIN_USER,
               MAAS_ROUTER_ADMIN_PASSWORD=ADMIN_PASSWORD)
    tls, ca = [], None
    if args.auth_tls:
        import tempfile

        from workers.agents.router.certificates import ensure_self_signed

        ca, key = (str(Path(tempfile.mkdtemp()) / name) for name in ("cert.pem", "key.pem"))
        ensure_self_signed(ca, key, "127.0.0.1")
        tls = ["--tls-cert", ca, "--tls-key", key]
    auth = subprocess.Popen([sys.executable, "manage.py", "run_authservice", "--port",
                             str(auth_port), *tls], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL)
    wait_port(auth_port, 30, process=auth)  # the router's first login goes there
    if args.router == "embedded":
        router = RouterProcess(extra_args=["--auth-service-ca", ca] if ca else [],
                               auth_port=auth_port)
    else:
        from tests.qdrouterd import QdrouterdProcess

        router = QdrouterdProcess(auth_port, auth_ca=ca)
    router.start()
    try:
        groups = {"app": {"users": f"app@{space.vhost}", "remoteHosts": "*", "sources": "*",
                          "targets": "*"}}
        if args.router == "embedded":
            mgmt = router.management()
            add_tenant(mgmt, space.vhost, {}, groups)
        else:  # qdrouterd's replies as the router agent reads them
            from workers.clients.qdr import Management

            mgmt = Management(f"amqp://127.0.0.1:{router.mgmt_port}", ADMIN_USER,
                              ADMIN_PASSWORD)
            mgmt.create("org.apache.qpid.dispatch.vhost", space.vhost,
                        {"hostname": space.vhost, "groups": groups})
        mgmt.close()
        port = router.amqp_port
        victim_login(port, f"app@{space.vhost}", "app-secret-1")  # warm: the service is up

        result = multiprocessing.Queue()
        attack = multiprocessing.Process(target=attacker, args=(
            port, args.idle, args.flood, args.seconds + 5, result))
        attack.start()
        time.sleep(5)  # the attack at full strength before the victim starts
        times, failures, most_db = [], [], 0
        stop = time.monotonic() + args.seconds
        next_at = time.monotonic()
        while time.monotonic() < stop:
            next_at += 1 / args.rate
            start = time.perf_counter()
            try:
                victim_login(port, f"app@{space.vhost}", "app-secret-1")
                times.append(time.perf_counter() - start)
            except Exception as exc:  # counted: a refused or broken login is a failure
                failures.append(repr(exc)[:120])
            if len(times) % 10 == 0:
                most_db = max(most_db, database_connections(args.database))
            time.sleep(max(0.0, next_at - time.monotonic()))
        router_rss = rss_mib(router.proc.pid)
        auth_rss = rss_mib(auth.pid)
        attack.join(60)
        answered = result.get(timeout=10) if not result.empty() else 0
        times.sort()
        total = len(times) + len(failures)
        print(f"router {args.router}; attacker from {ATTACKER}: {args.idle} idle or half-open "
              f"sockets, {args.flood:.0f} unknown logins a second for {args.seconds:.0f} s "
              f"({answered} answered)")
        if times:
            print(f"victim from {VICTIM}: {len(times)} of {total} logins succeeded; median "
                  f"{statistics.median(times) * 1000:.1f} ms, p99 "
                  f"{times[min(len(times) - 1, int(len(times) * 0.99))] * 1000:.1f} ms, "
                  f"slowest {times[-1] * 1000:.1f} ms")
        if failures:
            print(f"victim failures: {failures[:5]}")
        print(f"auth service database connections at most: {most_db}; RSS router "
              f"{router_rss:.0f} MiB, auth service {auth_rss:.0f} MiB")
        if args.router == "embedded":
            print(f"router: {router_refusals(router.metrics_port)}")
    finally:
        router.stop()
        auth.terminate()
        auth.wait(10)
        leftovers.clean_up(keep=args.keep)


if __name__ == "__main__":
    main()
