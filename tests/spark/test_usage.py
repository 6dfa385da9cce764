"""The usage rollups equal a plain-Python computation of the same definitions (docs/usage.md)
on generated samples with resets, duplicates, late files, a baseline day and a next day."""
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark.jobs import nightly
from spark.samples import gap, write_samples
from spark.usage import daily_address, existing_paths, read_samples, with_deltas

from . import generate
from .generate import DAY, START, TENANTS
from .rows import collect

pytestmark = pytest.mark.slow

COUNTERS = ("messages_in", "messages_out", "bytes_in", "bytes_out")
LINKS = ("connections", "senders", "receivers")


def reference(by_date: dict, day=DAY, tenants=TENANTS) -> dict[str, list[tuple]]:
    """The definitions, computed row by row."""
    end = START + timedelta(days=1)
    window = START - timedelta(days=1)
    read = [row for d in (day - timedelta(days=1), day, day + timedelta(days=1))
            for rows in by_date.get(d, []) for row in rows]
    unique = {row["sample_id"]: row for row in read if row["messages_in"] is not None}
    series = defaultdict(list)
    for row in unique.values():
        series[(row["source"], row["tenant"], row["space"], row["kind"], row["address"])].append(row)
    on_day = []  # (row, deltas)
    for rows in series.values():
        rows.sort(key=lambda r: (r["ts"], r["sample_id"]))
        before = [r for r in rows if r["ts"] < START]
        # What the day compares with: the highest readings of the last epoch seen before it.
        highest: dict = {}
        if before:
            last = before[-1]["epoch"]
            highest[last] = {c: max(r[c] for r in before if r["epoch"] == last)
                             for c in COUNTERS}
        seen = bool(before)
        for row in (r for r in rows if START <= r["ts"] < end):
            deltas = {}
            for c in COUNTERS:
                if not seen:
                    known = row["since"] is not None and row["since"] >= window
                    deltas[c] = row[c] if known else 0
                elif row["epoch"] not in highest:
                    deltas[c] = row[c]
                else:
                    deltas[c] = max(row[c] - highest[row["epoch"]][c], 0)
            epoch = highest.setdefault(row["epoch"], dict.fromkeys(COUNTERS, 0))
            for c in COUNTERS:
                epoch[c] = max(epoch[c], row[c])
            seen = True
            on_day.append((row, deltas))

    def hour(ts):
        return ts.replace(minute=0, second=0, microsecond=0)

    address_daily, address_hourly = {}, {}
    for row, deltas in on_day:
        # Space rows with traffic count under the address "".
        if row["kind"] != "address" and not sum(deltas.values()):
            continue
        for table, key in ((address_daily, (row["tenant"], row["space"], row["address"], day)),
                           (address_hourly, (row["tenant"], row["space"], row["address"],
                                             hour(row["ts"])))):
            acc = table.setdefault(key, [0, 0, 0, 0, 0, 0])
            for i, c in enumerate(COUNTERS):
                acc[i] += deltas[c]
            acc[4] = max(acc[4], row["stored_messages"])
            acc[5] = max(acc[5], row["stored_bytes"])

    series_minute = defaultdict(lambda: defaultdict(int))
    addresses = defaultdict(set)
    for row, _ in on_day:
        minute = row["ts"].replace(second=0, microsecond=0)
        key = (row["source"], row["tenant"], row["space"], row["kind"], row["address"], minute)
        gauges = series_minute[key]
        if row["kind"] == "address":
            gauges["stored_bytes"] = max(gauges["stored_bytes"], row["stored_bytes"])
            addresses[(row["tenant"], row["space"], hour(row["ts"]))].add(row["address"])
        else:
            for g in LINKS:
                gauges[g] = max(gauges[g], row[g])
        addresses.setdefault((row["tenant"], row["space"], hour(row["ts"])), set())
    space_minute = defaultdict(lambda: defaultdict(int))
    for (_, tenant, space, _, _, minute), gauges in series_minute.items():
        for g, value in gauges.items():
            space_minute[(tenant, space, minute)][g] += value
    peaks = {key: defaultdict(int) for key in addresses}
    for (tenant, space, minute), gauges in space_minute.items():
        p = peaks[(tenant, space, hour(minute))]
        for g, value in gauges.items():
            p[g] = max(p[g], value)
    space_peaks = {key: (*(p[g] for g in LINKS), len(addresses[key]), p["stored_bytes"])
                   for key, p in peaks.items()}

    tenant_daily = {t: [0, 0, 0, 0, 0, 0] for t in tenants}
    for (tenant, *_), acc in address_daily.items():
        for i in range(4):
            tenant_daily.setdefault(tenant, [0] * 6)[i] += acc[i]
    tenant_hour = defaultdict(lambda: [0, 0])
    for (tenant, _, h), p in space_peaks.items():
        tenant_hour[(tenant, h)][0] += p[4]
        tenant_hour[(tenant, h)][1] += p[0]
    for (tenant, _), (stored, conns) in tenant_hour.items():
        acc = tenant_daily.setdefault(tenant, [0] * 6)
        acc[4], acc[5] = max(acc[4], stored), max(acc[5], conns)
    return {
        "address_daily": sorted((*k, *v) for k, v in address_daily.items()),
        "address_hourly": sorted((*k, *v) for k, v in address_hourly.items()),
        "space_peaks": sorted((*k, *v) for k, v in space_peaks.items()),
        "tenant_daily": sorted((t, day, a[0], a[1], a[0] + a[1], a[2], a[3], a[2] + a[3], a[4],
                                a[5]) for t, a in tenant_daily.items()),
    }


ORDER = {
    "address_daily": ("tenant", "space", "address", "day", *COUNTERS, "stored_messages",
                      "stored_bytes"),
    "address_hourly": ("tenant", "space", "address", "hour", *COUNTERS, "stored_messages",
                       "stored_bytes"),
    "space_peaks": ("tenant", "space", "hour", *LINKS, "addresses", "stored_bytes"),
    "tenant_daily": ("tenant", "day", "messages_in", "messages_out", "messages", "bytes_in",
                     "bytes_out", "bytes", "stored_bytes", "connections"),
}


def as_tuples(results: dict[str, list[dict]]) -> dict[str, list[tuple]]:
    return {name: sorted(tuple(row[c] for c in ORDER[name]) for row in results[name])
            for name in ORDER}


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    by_date = generate.generate()
    base = str(tmp_path_factory.mktemp("usage") / "samples")
    generate.write(by_date, base)
    return base, by_date


@pytest.fixture(scope="module")
def results(spark, samples):
    base, _ = samples
    return nightly.run(spark, base, DAY, TENANTS, [], [])


def test_the_generated_samples_have_what_the_rollups_must_handle(samples):
    _, by_date = samples
    rows = [row for batches in by_date.values() for rows in batches for row in rows]
    ids = [row["sample_id"] for row in rows]
    late = [r for r in (row for rows in by_date[DAY + timedelta(days=1)] for row in rows)
            if r["ts"].date() == DAY]
    restarts = {row["epoch"] for row in rows if not row["epoch"].endswith("-0")}
    gaps = [row for row in rows if row["messages_in"] is None]
    octets = [row for row in rows if row["kind"] == "space" and row["bytes_in"]]
    known_start = [row for row in rows if row["since"] is not None and row["ts"].date() == DAY]
    assert len(ids) > len(set(ids)) and late and restarts and gaps and octets and known_start
    assert DAY - timedelta(days=2) in by_date and DAY + timedelta(days=1) in by_date


def test_the_rollups_equal_the_reference(samples, results):
    expected = reference(samples[1])
    assert as_tuples(results) == expected
    assert ("idle", DAY, 0, 0, 0, 0, 0, 0, 0, 0) in expected["tenant_daily"]
    assert expected["address_daily"] and expected["space_peaks"]


def test_hours_come_back_as_utc_datetimes(results):
    hours = {row["hour"] for row in results["address_hourly"]}
    assert hours == {START + timedelta(hours=h) for h in range(24)}


def test_epochs_gaps_duplicates_late_and_next_day_readings_by_hand(spark, tmp_path):
    base = str(tmp_path / "samples")

    def reading(hours: float, messages_in: int | None, sample_id: str | None = None,
                **series) -> dict:
        row = {"sample_id": sample_id or f"id-{hours}-{series}", "ts": START + timedelta(hours=hours),
               "tenant": "acme", "space": "shop", "address": "q", "source": "broker:b",
               "kind": "address", "epoch": "e1", "since": None, "messages_in": messages_in,
               "messages_out": 0, "bytes_in": 0, "bytes_out": 0, "stored_messages": 0,
               "stored_bytes": 0, "connections": 0, "senders": 0, "receivers": 0}
        row |= series
        return gap(row) if messages_in is None else row

    def at(hours: float) -> datetime:
        return START + timedelta(hours=hours)

    write_samples([reading(-30, 40), reading(-2, 100)], base, at(-2))  # baseline: 100
    write_samples([reading(1, 150), reading(2, 30, sample_id="dup", epoch="e2")], base, at(2))
    write_samples([reading(2, 30, sample_id="dup", epoch="e2")], base, at(3))  # a copy
    write_samples([reading(3, 20, epoch="e2")], base, at(3))  # lower, same epoch: not a reset
    write_samples([reading(23.5, 80, epoch="e2"), reading(25, 5000, epoch="e2")], base, at(25))
    # The source could not be read for two rounds: a gap, not zeros followed by a jump.
    write_samples([reading(-1, 500, address="paused")], base, at(-1))
    write_samples([reading(h, None, address="paused") for h in (1, 2)], base, at(2))
    write_samples([reading(3, 520, address="paused")], base, at(3))
    # First seen on the day: an unknown start bills growth only, a known one all of it.
    write_samples([reading(9, 10, address="new"), reading(10, 25, address="new")], base, at(10))
    write_samples([reading(9, 10, address="fresh", since=at(8.5)),
                   reading(10, 25, address="fresh", since=at(8.5))], base, at(10))
    write_samples([reading(4, 7, address="early", since=at(-20))], base, at(4))
    write_samples([reading(-50, 1, address="old")], base, at(-50))  # a partition not read
    write_samples([reading(5, 9, address="old")], base, at(5))
    # A lower reading before the day: the day compares with the epoch's highest (100).
    write_samples([reading(-3, 100, address="dip"), reading(-2, 60, address="dip")], base, at(-2))
    write_samples([reading(1, 110, address="dip")], base, at(1))
    # Two epochs taking turns within one hour: each compares with its own highest.
    write_samples([reading(-1, 90, address="mixed"), reading(1.1, 100, address="mixed"),
                   reading(1.2, 30, address="mixed", epoch="e2"),
                   reading(1.3, 120, address="mixed")], base, at(1.3))
    # A first reading of unknown start, and a second epoch opening in the same hour.
    write_samples([reading(5.1, 50, address="twice"), reading(5.2, 20, address="twice",
                                                               epoch="e2"),
                   reading(5.3, 70, address="twice")], base, at(5.3))
    rows = daily_address(with_deltas(read_samples(spark, base, DAY), DAY), DAY).collect()
    got = {row["address"]: row["messages_in"] for row in rows}
    # q: 50 + 30 (epoch e2 from zero) + 0 (lower) + 50 (80 - the highest 30 of e2).
    # mixed: 10 + 30 (e2 from zero) + 20 (120 - the highest 100 of e1).
    # twice: 0 (unknown start) + 20 (e2 from zero) + 20 (70 - 50).
    assert got == {"q": 130, "paused": 20, "new": 15, "fresh": 25, "early": 7, "old": 0,
                   "dip": 10, "mixed": 60, "twice": 40}


def test_a_gap_is_refused_unless_it_is_whole(tmp_path):
    row = {"sample_id": "a", "ts": START, "tenant": "t", "space": "s", "address": "q",
           "source": "router:r", "kind": "address", "epoch": "e", "since": None,
           **dict.fromkeys(COUNTERS + LINKS + ("stored_messages", "stored_bytes"), 0)}
    with pytest.raises(ValueError, match="every counter"):
        write_samples([row | {"bytes_in": None}], str(tmp_path), START)
    with pytest.raises(ValueError, match="epoch"):
        write_samples([row | {"epoch": None}], str(tmp_path), START)
    assert write_samples([gap(row)], str(tmp_path), START).endswith(".parquet")


def test_an_empty_store_reads_as_no_samples(spark, tmp_path):
    assert read_samples(spark, str(tmp_path / "nothing"), DAY).count() == 0


def test_only_the_days_that_exist_are_read(spark, tmp_path):
    """The store's first day (no day before) and today (no day after yet): the day's readings,
    the missing neighbours asked of the file system first rather than failed on."""
    base = str(tmp_path / "store")
    row = {"tenant": "acme", "space": "shop", "address": "q", "source": "broker:b",
           "kind": "address", "epoch": "e1", "since": None, "messages_out": 0, "bytes_in": 0,
           "bytes_out": 0, "stored_messages": 0, "stored_bytes": 0, "connections": 0,
           "senders": 0, "receivers": 0}
    write_samples([row | {"sample_id": f"s{h}", "ts": START + timedelta(hours=h),
                          "messages_in": n} for h, n in ((1, 10), (2, 25))],
                  base, START + timedelta(hours=2))
    days = [f"{base}/date={DAY + timedelta(days=n)}" for n in (-1, 0, 1)]
    assert existing_paths(spark, days) == [days[1]]
    rows = daily_address(with_deltas(read_samples(spark, base, DAY), DAY), DAY).collect()
    assert [(row["address"], row["messages_in"]) for row in rows] == [("q", 15)]


def test_a_cli_rerun_replaces_the_days_partitions(spark, samples, results, tmp_path):
    out = tmp_path / "out"
    # What an earlier run of the day left behind: it must go, not add up.
    for name in ORDER:
        old = {k: v for k, v in next(iter(results[name])).items() if k != "day"} | {"tenant": "ghost"}
        (out / name / f"day={DAY}").mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist([old]), out / name / f"day={DAY}" / "old.parquet")
    tenants = tmp_path / "tenants.txt"
    tenants.write_text("\n".join(TENANTS) + "\n")
    nightly.main(["--samples", samples[0], "--day", DAY.isoformat(), "--out", str(out),
                  "--tenants", str(tenants)])
    written = {name: collect(spark.read.parquet(f"{out}/{name}")) for name in ORDER}
    assert as_tuples(written) == as_tuples(results)
    assert spark.read.parquet(f"{out}/quota").count() == 4 * len(TENANTS)


def test_written_timestamps_are_utc(tmp_path):
    path = write_samples([{"sample_id": "a", "ts": datetime(2026, 11, 20, 1, tzinfo=UTC),
                           "tenant": "t", "space": "s", "address": "", "source": "router:r",
                           "kind": "space", "epoch": "", **dict.fromkeys(COUNTERS, 0),
                           "stored_messages": 0,
                           "stored_bytes": 0, **dict.fromkeys(LINKS, 1)}],
                         str(tmp_path), datetime(2026, 11, 21, 0, 5, tzinfo=UTC))
    assert "/date=2026-11-21/" in path
    assert pq.read_table(path).column("ts")[0].as_py() == datetime(2026, 11, 20, 1, tzinfo=UTC)
