"""Where the CPU goes (issue 16): each process's CPU at rest and per address create, printed,
never asserted.

    .venv/bin/python tests/bench/bench_cpu_per_change.py --start            # its own platform
    .venv/bin/python tests/bench/bench_cpu_per_change.py --start --kind queue --creates 300

With --start it runs the platform (`manage.py runplatform`, as `make run` does) on a database
and Celery queues of its own (bench_scale's Platform), and at the end deletes the vhosts and
users of its spaces and the database if it created it (`--keep` leaves them); without, it
measures the platform that DATABASE_URL, --url and --platform-pid point at (a filled one: the
cost of a change is meant to be flat in the fleet's size) and deletes nothing. It makes a tenant
with --spaces spaces of the kind's type, then:

- at rest: each process's CPU over --idle seconds, as a share of one core;
- --creates creates through the API at --rate a second spread over the spaces, until the last
  is Active: each process's CPU beyond its rest, in ms per create; and the API's latency and
  create -> Active, as bench_scale measures them.

--load NxDUTY runs N processes besides, each busy DUTY of a core in a session of its own (a
stand-in for what else holds the cores at 100k: the brokers, PostgreSQL), so that latencies are
measured under contention on an empty platform (docs/scale.md, "A new queue by name").

A process's CPU counts its live descendants and those it reaped (utime, stime, cutime and
cstime in /proc), so PostgreSQL's backends that `CONN_MAX_AGE` closes meanwhile still count.
On two cores, 20 creates a second at X ms each take X * 2% of the machine.
"""
import argparse
import os
import statistics
import sys
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tests.bench.bench_scale import (  # noqa: E402
    Platform,
    load,
    pct,
    probe_creates,
    probe_tenant,
    to_active,
    wait_all_active,
)
from tests.bench.common import KEEP_HELP, Leftovers  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")

# A platform process's name, from its command line (runplatform's process names).
ROLES = (("gunicorn", "web"), ("agents@", "agents worker"), ("background@", "background worker"),
         ("watch@", "watch worker"), ("celery -A maas beat", "beat"),
         ("dataplane.router", "router"), ("qdrouterd", "router"),
         ("run_authservice", "authservice"), ("mqtt_gateway", "mqtt-gateway"),
         ("vhost_relay", "vhost-relay"), ("runplatform", "runplatform"))
SERVICES = (("beam.smp", "rabbitmq (all nodes)"), ("redis-server", "redis"))


def processes() -> dict[int, tuple[int, str, float]]:
    """{pid: (parent pid, command line, CPU seconds incl. reaped children)} of every process."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        # fields[0] is the state (field 3): utime..cstime are fields 14-17
        cpu = sum(int(x) for x in fields[11:15]) / TICKS
        out[int(pid)] = (int(fields[1]), cmd, cpu)
    return out


def snapshot(platform_pid: int | None) -> dict[str, float]:
    """CPU seconds so far by role: the platform's processes (each with its descendants),
    PostgreSQL (the postmaster with its backends), RabbitMQ and Redis."""
    procs = processes()

    def top(pid):  # the platform's child (or the service's root) that pid descends from
        chain = []
        while pid in procs:
            chain.append(pid)
            pid = procs[pid][0]
        return chain

    totals: dict[str, float] = {}
    for pid, (_, cmd, cpu) in procs.items():
        chain = top(pid)
        role = None
        if platform_pid and platform_pid in chain:
            below = chain[:chain.index(platform_pid)]
            head = procs[below[-1]][1] if below else procs[platform_pid][1]
            role = next((name for key, name in ROLES if key in head), head[:40])
        elif any(procs[p][1].startswith(("postgres", "/usr/lib/postgresql")) for p in chain):
            role = "postgresql (all)"
        else:
            role = next((name for key, name in SERVICES if key in cmd), None)
        if role:
            totals[role] = totals.get(role, 0.0) + cpu
    return totals


def database_counts() -> tuple[int, int]:
    """(sessions opened, transactions committed) so far in this platform's database."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT sessions, xact_commit FROM pg_stat_database"
                       " WHERE datname = current_database()")
        return cursor.fetchone()


def burn(duty: float) -> None:
    """Busy `duty` of every 10 ms, for ever (a --load process, in a session of its own)."""
    os.setsid()
    while True:
        began = time.perf_counter()
        while time.perf_counter() - began < 0.01 * duty:
            pass
        time.sleep(0.01 * (1 - duty))


def start_load(spec: str | None) -> list[int]:
    """--load NxDUTY: the pids of the N busy processes."""
    if not spec:
        return []
    n, duty = spec.split("x")
    pids = []
    for _ in range(int(n)):
        pid = os.fork()
        if pid == 0:
            try:
                burn(float(duty))
            finally:
                os._exit(0)
        pids.append(pid)
    return pids


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("anycast", "queue"), default="anycast",
                        help="anycast addresses in standard spaces or queues in brokered ones")
    parser.add_argument("--spaces", type=int, default=8)
    parser.add_argument("--creates", type=int, default=600)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--idle", type=float, default=30.0, help="seconds at rest measured")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--database", default="maas_bench_cpu")
    parser.add_argument("--start", action="store_true")
    parser.add_argument("--keep", action="store_true",
                        help="with --start: " + KEEP_HELP)
    parser.add_argument("--platform-pid", type=int,
                        help="without --start: the runplatform process measured")
    parser.add_argument("--log")
    parser.add_argument("--load", metavar="NxDUTY",
                        help="N processes besides, each busy DUTY (0-1) of a core, e.g. 3x0.45")
    args = parser.parse_args()

    leftovers = Leftovers()  # what --start makes here; without it, nothing is recorded
    if args.start:
        os.environ["DATABASE_URL"] = leftovers.ensure_database(args.database)
        os.environ.setdefault("MAAS_CELERY_QUEUE", f"maas-bench-{uuid.uuid4().hex[:6]}")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "maas.settings")
    os.environ["MAAS_LOG_LEVEL"] = "WARNING"
    import django
    django.setup()

    platform = Platform(args)
    load_pids = start_load(args.load)
    if args.start:
        platform.start()
    root = platform.proc.pid if platform.proc else args.platform_pid
    try:
        _, session, base_url = probe_tenant("cpu", args.url)
        space_type = "standard" if args.kind == "anycast" else "brokered"
        plan = "standard-unlimited" if space_type == "standard" else "brokered-single-broker"
        spaces = [(f"c{i}", space_type) for i in range(args.spaces)]
        for name, _ in spaces:
            session.post(base_url + "/", json={"metadata": {"name": name}, "spec": {
                "type": space_type, "plan": plan}}).raise_for_status()
        wait_all_active(600)
        time.sleep(5)  # the spaces' own follow-ups (status, first resync) settle

        before, t0, db0 = snapshot(root), time.monotonic(), database_counts()
        time.sleep(args.idle)
        rest, idle, db1 = snapshot(root), time.monotonic() - t0, database_counts()
        latencies, called, web = probe_creates(session, base_url, spaces, args.creates,
                                               args.rate)
        active, missing = to_active(called)
        after, busy, db2 = snapshot(root), time.monotonic() - t0 - idle, database_counts()
        print(f"{args.creates} {args.kind} creates at {args.rate:.0f}/s over {args.spaces} "
              f"spaces, all Active after {busy:.1f} s ({load()}):")
        print(f"  API create p50 {pct(latencies, 50):.1f} ms  p99 {pct(latencies, 99):.1f} ms;"
              f" create -> Active p50 {pct(active, 50):.0f} ms  p99 {pct(active, 99):.0f} ms"
              f" (not Active in 60 s: {missing})")
        print(f"  the web per create: on a core p50 {pct([w[0] for w in web], 50):.1f} ms, "
              f"waiting for a core p50 {pct([w[1] for w in web], 50):.1f} / p99 "
              f"{pct([w[1] for w in web], 99):.1f} ms")
        # the bench's own reads of pg_stat_database count too: a session and a few commits
        print("  PostgreSQL per create: " + ", ".join(
            f"{(db2[i] - db1[i] - (db1[i] - db0[i]) / idle * busy) / args.creates:.2f} {what}"
            for i, what in enumerate(("sessions opened", "transactions"))) + "; at rest: "
            + ", ".join(f"{(db1[i] - db0[i]) / idle:.2f} {what}/s"
                        for i, what in enumerate(("sessions", "transactions"))))
        print(f"  {'process':<24} {'at rest, % core':>16} {'ms CPU per create':>18}")
        per_create = {}
        for role in sorted(after, key=lambda r: -(after[r] - rest.get(r, after[r]))):
            at_rest = (rest.get(role, 0.0) - before.get(role, 0.0)) / idle
            extra = after[role] - rest.get(role, 0.0) - at_rest * busy
            per_create[role] = max(0.0, extra) / args.creates * 1000
            print(f"  {role:<24} {at_rest * 100:>15.1f}% {per_create[role]:>18.1f}")
        total = sum(per_create.values())
        print(f"  {'all':<24} {'':>16} {total:>18.1f}  (at {args.rate:.0f}/s: "
              f"{total * args.rate / 10:.0f}% of one core; median API "
              f"{statistics.median(latencies) * 1000:.1f} ms)")
    finally:
        platform.stop()
        for pid in load_pids:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        if args.start:  # without, it measured someone else's platform: nothing is deleted
            leftovers.clean_up(keep=args.keep)


if __name__ == "__main__":
    main()
