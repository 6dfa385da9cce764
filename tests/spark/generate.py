"""Generated usage samples for the Spark tests: restarts (new epochs), lower readings within an
epoch, gaps, duplicates, late files, a baseline day, a next day that must not count, series first
seen on the day with and without a known start, space rows with traffic (a brokered space's
octets), and a reading two days back (in a partition the job does not read)."""
import random
import uuid
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta

from spark.samples import gap, write_samples

DAY = date(2026, 11, 20)
START = datetime(2026, 11, 20, tzinfo=UTC)
TENANTS = ["acme", "beta", "gamma", "idle"]  # idle: no traffic at all
SPACES = {("acme", "shop"): 3, ("acme", "ops"): 2, ("beta", "main"): 2, ("gamma", "g1"): 1}


def _series():
    for (tenant, space), n in SPACES.items():
        broker = f"broker:{tenant}-{space}"
        sources = [broker, "router:r1"] if space == "shop" else [broker]
        for i in range(n):
            for source in sources:
                yield source, tenant, space, "address", f"q{i}"
        for source in sources:
            yield source, tenant, space, "space", ""


def generate(seed: int = 5) -> dict[date, list[list[dict]]]:
    """{written date: [file rows, ...]}: what was written where."""
    rng = random.Random(seed)
    files: dict[tuple[date, int], list[dict]] = defaultdict(list)
    for n, (source, tenant, space, kind, address) in enumerate(_series()):
        # Two series are first seen on the day itself, one of them with a known start; the
        # others from two days before.
        first = START + timedelta(hours=9) if n in (3, 4) else START - timedelta(days=2)
        ts = first + timedelta(minutes=rng.randrange(0, 30))
        epoch, since = 0, (first if n == 4 else None)
        counters = dict.fromkeys(("messages_in", "messages_out", "bytes_in", "bytes_out"), 0)
        octets = kind == "space" and space == "main"  # traffic measured per space only
        while ts < START + timedelta(days=1, hours=6):
            if rng.random() < 0.03:  # the source restarted: a new counter instance
                counters = dict.fromkeys(counters, 0)
                epoch, since = epoch + 1, ts - timedelta(seconds=rng.randrange(1, 300))
            for key in counters:
                counters[key] += rng.randrange(0, 50) * (100 if key.startswith("bytes") else 1)
            row = {"sample_id": uuid.uuid4().hex, "ts": ts, "tenant": tenant, "space": space,
                   "address": address, "source": source, "kind": kind,
                   "epoch": f"{source}-{epoch}", "since": since,
                   "stored_messages": 0, "stored_bytes": 0, "connections": 0, "senders": 0,
                   "receivers": 0}
            row.update(counters if kind == "address" else dict.fromkeys(counters, 0))
            if octets:
                row.update(bytes_in=counters["bytes_in"], bytes_out=counters["bytes_out"])
            if kind == "address":
                row["stored_messages"] = rng.randrange(0, 20)
                row["stored_bytes"] = row["stored_messages"] * rng.randrange(50, 150)
            else:
                row.update(connections=rng.randrange(0, 9), senders=rng.randrange(0, 5),
                           receivers=rng.randrange(0, 5))
            luck = rng.random()
            if luck < 0.03:  # the source could not be read
                row = gap(row)
            elif luck < 0.05 and kind == "address":  # a reading lower than the one before
                row.update({k: v // 2 for k, v in counters.items()})
            written = ts.date()
            if ts.date() == DAY and ts.hour >= 20 and rng.random() < 0.4:
                written = DAY + timedelta(days=1)  # late
            files[(written, ts.hour // 8)].append(row)
            if rng.random() < 0.08:  # the same reading written twice, maybe a day later
                again = written + timedelta(days=rng.randrange(0, 2))
                files[(again, rng.randrange(0, 3))].append(dict(row))
            # Readings every ~15 minutes, sometimes two in one minute.
            ts += timedelta(seconds=rng.choice([5, 600, 900, 900, 1200]))
    by_date: dict[date, list[list[dict]]] = defaultdict(list)
    for (written, _), rows in sorted(files.items(), key=lambda item: item[0]):
        by_date[written].append(rows)
    return by_date


def write(by_date: dict[date, list[list[dict]]], base: str) -> None:
    for written, batches in by_date.items():
        for rows in batches:
            write_samples(rows, base, datetime.combine(written, datetime.min.time(), tzinfo=UTC))
