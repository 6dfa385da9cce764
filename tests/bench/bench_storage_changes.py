"""What a brokered space's change costs the storage controller on a broker of many vhosts
(issue 66), printed, never asserted. In this process, against the broker of RABBITMQ_API_URL
(the local default node unless set), with a database of its own (`--database`, created and
migrated if missing):

- the management API's reads of a small vhost on that broker, median of --repeat: those by name
  (a queue) against those that list the vhost (its queues or exchanges with statistics, as the
  usage sampler reads them; its definitions, as the full apply reads them), which RabbitMQ 3.10
  answers by scanning the whole broker's tables;
- the storage controller's run (`runner.run`, as the agents' worker runs it) for 1, 5 and 20
  new queues of a brokered space of --queues queues: the short path (by name) and the full apply
  (listings and one import) in the same run, median of --repeat each.

Run it beside other tenants' vhosts (tests/bench/idle_vhosts.py) to see what grows with them:

    .venv/bin/python tests/bench/idle_vhosts.py --vhosts 1000
    .venv/bin/python tests/bench/bench_storage_changes.py

The space, its vhost and users are deleted after; the database too if the run created it
(`--keep` leaves them).
"""
import argparse
import os
import statistics
import sys
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tests.bench.common import (  # noqa: E402
    KEEP_HELP,
    Leftovers,
    delete_queues,
    unlimited_tenant,
)


def median_ms(values) -> str:
    return f"{statistics.median(values) * 1000:.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", default="maas_bench_storage_changes")
    parser.add_argument("--queues", type=int, default=100, help="queues of the space at first")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help=KEEP_HELP)
    args = parser.parse_args()

    leftovers = Leftovers()
    os.environ["DATABASE_URL"] = leftovers.ensure_database(args.database)
    # The wake-ups the changes send go to a queue of their own (no worker runs here: this
    # process runs the agent), deleted after.
    queue = f"maas-bench-{uuid.uuid4().hex[:6]}"
    os.environ.update(DJANGO_SETTINGS_MODULE="maas.settings", MAAS_LOG_LEVEL="WARNING",
                      MAAS_CELERY_QUEUE=queue)
    import django

    try:
        django.setup()
        run(args)
    finally:
        leftovers.clean_up(keep=args.keep)
        delete_queues(queue)


def run(args) -> None:
    from config_service import services
    from core.context import Context
    from workers import endpoints
    from workers.agents import runner
    from workers.agents.storage import agent as controller

    ctx = Context(actor="bench")
    tenant = unlimited_tenant(ctx)
    space = services.create_address_space(ctx=ctx, tenant=tenant, name="b", type="brokered",
                                          plan="brokered-single-broker")
    services.create_addresses(ctx=ctx, space=space, items=[
        {"address": f"q{i}", "type": "queue", "plan": "brokered-queue"}
        for i in range(args.queues)])
    api = controller.management_api(endpoints.of(space).broker)
    vhosts = len(api.vhost_names())
    began = time.monotonic()
    while True:  # the vhost's start waits its turn behind the broker's others
        try:
            runner.run(space.uid, "storage")
            break
        except runner.TransientError as exc:
            if time.monotonic() - began > 300:
                raise SystemExit(f"the first apply did not succeed in 300 s: {exc}") from exc
            time.sleep(1)
    print(f"broker {api.base_url}: {vhosts} vhosts; a new brokered space of {args.queues} "
          f"queues: {time.monotonic() - began:.1f} s to its first apply")
    try:
        reads(api, space.vhost, args.repeat)
        changes(ctx, space, args.repeat)
    finally:
        services.delete_address_space(ctx=ctx, space=space)
        for _ in range(10):  # a vhost delete waits its turn, as its start did
            try:
                runner.run(space.uid, "storage")
                break
            except runner.TransientError:
                time.sleep(1)


def reads(api, vhost: str, repeat: int) -> None:
    calls = {
        "a queue by name": (f"/queues/{vhost}/q1", {"disable_stats": "true"}),
        "the vhost's queues, statistics (the sampler)": (
            f"/queues/{vhost}", {"columns": "name,message_stats.publish,messages",
                                 "page": 1, "page_size": 500}),
        "the vhost's exchanges, statistics (the sampler)": (
            f"/exchanges/{vhost}", {"columns": "name,message_stats.publish_in",
                                    "page": 1, "page_size": 500}),
        "the vhost's definitions (the full apply)": (f"/definitions/{vhost}", None),
    }
    times: dict[str, list[float]] = {label: [] for label in calls}
    for _ in range(repeat):
        for label, (path, params) in calls.items():
            started = time.monotonic()
            api.request("GET", path, params=params)
            times[label].append(time.monotonic() - started)
    print(f"management API reads of this space's vhost (median of {repeat}):")
    for label, values in times.items():
        print(f"  {label}: {median_ms(values)}")


def changes(ctx, space, repeat: int) -> None:
    from config_service import services
    from workers.agents import runner
    from workers.agents.storage import agent as controller

    by_name = controller.NEW_QUEUES_BY_NAME
    print(f"the storage controller's run for new queues (median of {repeat}):")
    for n in (1, 5, 20):
        figures = {}
        for path, limit in (("by name", by_name), ("full apply", 0)):
            controller.NEW_QUEUES_BY_NAME = limit  # 0: every change takes the full apply
            took = []
            for _ in range(repeat):
                services.create_addresses(ctx=ctx, space=space, items=[
                    {"address": f"n{uuid.uuid4().hex[:10]}", "type": "queue",
                     "plan": "brokered-queue"} for _ in range(n)])
                started = time.monotonic()
                runner.run(space.uid, "storage")
                took.append(time.monotonic() - started)
            figures[path] = took
        controller.NEW_QUEUES_BY_NAME = by_name
        print(f"  {n} new: by name {median_ms(figures['by name'])}, full apply "
              f"{median_ms(figures['full apply'])}")


if __name__ == "__main__":
    main()
