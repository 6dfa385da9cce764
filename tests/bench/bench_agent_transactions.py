"""How long a database transaction stays open while agents reconcile (printed, not asserted).

Starts an embedded router of its own (free ports) and uses a database of its own
(`--database`, created and migrated if missing) and the local RabbitMQ. Creates SPACES standard
address spaces with QUEUES queues each (their autoLinks make the router agent wait for the
broker) through the service functions, then reconciles each space with the storage controller
and the router agent, one after the other, as a worker does. Meanwhile a second connection
reads pg_stat_activity every few milliseconds and keeps the longest time any other session of
the database had a transaction open (`now() - xact_start`), and the longest one left idle in a
transaction. Prints those with the median and longest reconcile. The spaces are deleted and
torn down after; then the database too if the run created it (`--keep` leaves it and whatever
of the spaces' vhosts and users is left).

    .venv/bin/python tests/bench/bench_agent_transactions.py --spaces 20 --queues 5
"""
import argparse
import os
import statistics
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tests.bench.common import KEEP_HELP, Leftovers, unlimited_tenant  # noqa: E402
from tests.router.conftest import ADMIN_PASSWORD, RouterProcess  # noqa: E402


class TransactionWatch(threading.Thread):
    """Polls pg_stat_activity of one database from a connection of its own."""

    def __init__(self, database: str, interval: float = 0.005):
        super().__init__(daemon=True)
        self.database, self.interval = database, interval
        self.longest_open = self.longest_idle = 0.0
        self.stop = threading.Event()

    def run(self):
        import psycopg

        query = ("SELECT coalesce(max(extract(epoch FROM now() - xact_start)), 0), "
                 "coalesce(max(extract(epoch FROM now() - xact_start)) FILTER "
                 "(WHERE state = 'idle in transaction'), 0) FROM pg_stat_activity "
                 "WHERE datname = %s AND pid <> pg_backend_pid() AND xact_start IS NOT NULL")
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:5432/{self.database}",
                             autocommit=True) as conn:
            while not self.stop.is_set():
                opened, idle = conn.execute(query, (self.database,)).fetchone()
                self.longest_open = max(self.longest_open, float(opened))
                self.longest_idle = max(self.longest_idle, float(idle))
                time.sleep(self.interval)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", type=int, default=20)
    parser.add_argument("--queues", type=int, default=5)
    parser.add_argument("--database", default="maas_bench_agents")
    parser.add_argument("--keep", action="store_true", help=KEEP_HELP)
    args = parser.parse_args()

    leftovers = Leftovers()
    os.environ["DATABASE_URL"] = leftovers.ensure_database(args.database)
    router = RouterProcess()
    router.start()
    os.environ.update(MAAS_ROUTER_MANAGEMENT_URL=f"amqp://127.0.0.1:{router.mgmt_port}",
                      MAAS_ROUTER_ADMIN_USER="admin", MAAS_ROUTER_ADMIN_PASSWORD=ADMIN_PASSWORD,
                      MAAS_ROUTER_AMQP_PORT=str(router.amqp_port),
                      DJANGO_SETTINGS_MODULE="maas.settings", MAAS_LOG_LEVEL="WARNING")
    import django

    try:
        django.setup()
        run(args)
    finally:
        router.stop()
        leftovers.clean_up(keep=args.keep)


def run(args) -> None:
    from config_service import services
    from core.context import Context
    from workers.agents import runner

    ctx = Context(actor="bench")
    tenant = unlimited_tenant(ctx)
    spaces = []
    for i in range(args.spaces):
        space = services.create_address_space(ctx=ctx, tenant=tenant, name=f"s{i}",
                                              type="standard", plan="standard-unlimited")
        for q in range(args.queues):
            services.create_address(ctx=ctx, space=space, address=f"q{q}", type="queue",
                                    plan="standard-small-queue")
        spaces.append(space)

    watch = TransactionWatch(args.database)
    watch.start()
    durations = []
    try:
        for space in spaces:
            for kind in ("storage", "router"):
                started = time.monotonic()
                runner.run(space.uid, kind)
                durations.append(time.monotonic() - started)
    finally:
        watch.stop.set()
        watch.join()
        for space in spaces:
            services.delete_address_space(ctx=ctx, space=space)
            for kind in ("router", "storage"):
                runner.run(space.uid, kind)
    print(f"reconciles: {len(durations)} ({args.spaces} spaces x storage, router; "
          f"{args.queues} queues each)")
    print(f"reconcile median {statistics.median(durations) * 1000:.0f} ms, "
          f"longest {max(durations) * 1000:.0f} ms")
    print(f"longest transaction open: {watch.longest_open * 1000:.0f} ms; "
          f"longest idle in transaction: {watch.longest_idle * 1000:.0f} ms")


if __name__ == "__main__":
    main()
