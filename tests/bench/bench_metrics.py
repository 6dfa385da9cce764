"""Server time and queries of one /metrics scrape at fleet scale (printed, not asserted).

Fills a database of its own (`--database`, created and migrated if missing, refilled when its
size differs; dropped at the end if the run created it, unless `--keep`: one that was there is
reused and kept) with SPACES address spaces (half standard, half brokered, 1% terminating) of
ADDRESSES addresses each (5% unscheduled), their agents' states (2% invalidated, --errors of
the addresses named in an address error), an event per address, each applied by two agent
kinds (an hour ago, but the last 1% within the minute: a scrape reads the last minute's rows,
having summed the others once per process), and an outbox row per event (1% unacknowledged).
The rows are bulk-inserted, not made through the service functions: the scrape only reads
them, and 100,000 creates take long.
Then times a scrape's queries and text, as the view makes them, REPEAT times.

    .venv/bin/python tests/bench/bench_metrics.py --spaces 1000 --addresses 100
"""
import argparse
import os
import random
import statistics
import sys
import time
import uuid
from datetime import timedelta

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tests.bench.common import KEEP_HELP, Leftovers  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", type=int, default=1000)
    parser.add_argument("--addresses", type=int, default=100)
    parser.add_argument("--errors", type=float, default=0.001, help="share of addresses")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--database", default="maas_bench_metrics")
    parser.add_argument("--keep", action="store_true", help=KEEP_HELP)
    args = parser.parse_args()
    leftovers = Leftovers(spaces=False)  # its spaces are rows alone, nothing on a broker
    os.environ.update(DATABASE_URL=leftovers.ensure_database(args.database),
                      DJANGO_SETTINGS_MODULE="maas.settings", MAAS_LOG_LEVEL="WARNING")
    import django

    django.setup()
    try:
        fill(args)
        run(args)
    finally:
        leftovers.clean_up(keep=args.keep)


def fill(args) -> None:
    from django.db import connection, transaction
    from django.utils import timezone

    from config_service.models import Address, AddressSpace, AgentState, AppliedEvent
    from eventlog.models import ConfigEvent, EventStream, Outbox
    from tenants.models import Tenant

    if (AddressSpace.objects.count(), Address.objects.count()) == (
            args.spaces, args.spaces * args.addresses):
        return
    rng, now = random.Random(16), timezone.now()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("truncate tenants_tenant cascade")
        tenants = Tenant.objects.bulk_create(
            [Tenant(slug=f"t{i}") for i in range((args.spaces + 9) // 10)])
        spaces = [AddressSpace(uid=uuid.uuid4(), tenant=tenants[i // 10], name=f"s{i}",
                               type="standard" if i % 2 else "brokered", plan="p",
                               resource_version=1, last_sequence=args.addresses + 1,
                               terminating=i % 100 == 99, created_at=now, updated_at=now)
                  for i in range(args.spaces)]
        EventStream.objects.bulk_create([
            EventStream(uid=s.uid, kind="address_space", tenant=s.tenant,
                        last_sequence=s.last_sequence) for s in spaces])
        AddressSpace.objects.bulk_create(spaces)
        addresses, events, states = [], [], []
        for s in spaces:
            types = ("anycast", "multicast", "queue", "topic") if s.type == "standard" else (
                "queue", "topic")
            for j in range(args.addresses):
                addresses.append(Address(
                    space=s, name=f"{s.name}.a{j}", address=f"a{j}", type=types[j % len(types)],
                    plan="p", scheduled=rng.random() > 0.05, resource_version=j + 2,
                    created_at=now, updated_at=now))
                events.append(ConfigEvent(stream_id=s.uid, tenant_id=s.tenant_id, sequence=j + 2,
                                          type="address.created", payload={}, actor="bench",
                                          created_at=now))
            for kind in ("storage", "router") if s.type == "standard" else ("storage",):
                states.append(AgentState(
                    space_uid=s.uid, kind=kind, applied_at=now,
                    applied_sequence=rng.randint(args.addresses // 2, args.addresses + 1),
                    invalidated="Router restarted" if rng.random() < 0.02 else "",
                    address_errors={f"{s.name}.a{j}": {"message": "bench", "permanent": j % 2}
                                    for j in range(args.addresses) if rng.random() < args.errors}))
        Address.objects.bulk_create(addresses, batch_size=5000)
        ConfigEvent.objects.bulk_create(events, batch_size=5000)
        AgentState.objects.bulk_create(states)
        applied, outbox = [], []
        rows = ConfigEvent.objects.values_list("position", "stream_id", "sequence")
        recent = int(0.99 * len(rows))  # the last 1% applied within the minute, the rest long ago
        for i, (position, stream, sequence) in enumerate(rows):
            at = now if i >= recent else now - timedelta(hours=1)
            applied += [AppliedEvent(event_id=position, kind=kind, applied_at=at,
                                     latency_seconds=rng.expovariate(2))
                        for kind in ("storage", "router")]
            outbox.append(Outbox(event_id=position, stream_uid=stream, sequence=sequence,
                                 acked_at=None if rng.random() < 0.01 else now))
        AppliedEvent.objects.bulk_create(applied, batch_size=10000)
        Outbox.objects.bulk_create(outbox, batch_size=10000)
    with connection.cursor() as cursor:
        cursor.execute("analyze")


def run(args) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from config_service.models import Address, AgentState, AppliedEvent
    from maas import metrics

    def scrape() -> float:
        started = time.perf_counter()
        metrics.scrape()  # what the view returns
        return time.perf_counter() - started

    first = scrape()  # this process's first: sums the whole AppliedEvent table once
    with CaptureQueriesContext(connection) as queries:
        scrape()
    times = sorted(scrape() for _ in range(args.repeat))
    errors = sum(len(s.address_errors) for s in AgentState.objects.only("address_errors"))
    print(f"{args.spaces} spaces, {Address.objects.count()} addresses, {errors} address errors, "
          f"{AppliedEvent.objects.count()} applied events")
    print(f"scrape: first {first * 1000:.0f} ms, then median "
          f"{statistics.median(times) * 1000:.0f} ms, max {times[-1] * 1000:.0f} ms "
          f"over {args.repeat}; {len(queries)} queries")


if __name__ == "__main__":
    main()
