"""The live evaluation (workers/usage/live.py, no Spark) applies the job's rules: deltas against
hand-computed values, then the same tenant day and the same breaches as the Spark job on
generated samples, whether it starts from the day's start or from stored hourly rollups."""
import random
import uuid
from datetime import UTC, date, datetime, timedelta

import pytest

from spark import quota
from spark.jobs import nightly
from spark.samples import COUNTERS, GAUGES, gap, write_samples
from tenants.limits import USAGE_LIMITS, breached, breaches
from workers.usage import live

pytestmark = pytest.mark.slow  # a Spark JVM starts (seconds)

DAY = date(2026, 11, 20)
START = datetime(2026, 11, 20, tzinfo=UTC)
WINDOW = START - timedelta(minutes=5)


def reading(minute: int, messages: int, *, epoch: str = "e1", since=None, source="router:r",
            address="q", sample_id=None, **extra) -> dict:
    """One address reading `minute` minutes into DAY: messages_in = messages, the rest derived."""
    row = {"sample_id": sample_id or uuid.uuid4().hex, "ts": START + timedelta(minutes=minute),
           "tenant": "t1", "space": "s1", "address": address, "source": source,
           "kind": "address", "epoch": epoch, "since": since, "messages_in": messages,
           "messages_out": 2 * messages, "bytes_in": 100 * messages, "bytes_out": 0,
           **dict.fromkeys(GAUGES, 0)}
    row.update(extra)
    return row


def deltas(rows: list[dict]) -> list[int]:
    """messages_in deltas in the order of the readings kept."""
    return [r["messages_in_delta"] for r in live.with_deltas(live.readings(rows), WINDOW)]


# The delta rules, by hand ------------------------------------------------------------------

def test_growth_within_one_epoch_bills_the_difference():
    assert deltas([reading(1, 100), reading(2, 150), reading(3, 400)]) == [0, 50, 250]


def test_a_lower_reading_of_the_same_epoch_bills_nothing_and_the_next_compares_with_the_highest():
    assert deltas([reading(1, 100), reading(2, 80), reading(3, 130)]) == [0, 0, 30]


def test_a_new_epoch_bills_its_whole_count():
    assert deltas([reading(1, 100), reading(2, 30, epoch="e2"), reading(3, 45, epoch="e2")]) \
        == [0, 30, 15]


def test_an_epoch_seen_before_compares_with_its_own_highest():
    # spark.usage.with_deltas: the highest earlier reading of the same epoch, wherever it is.
    assert deltas([reading(1, 100), reading(2, 30, epoch="e2"), reading(3, 120)]) == [0, 30, 20]


def test_a_series_without_baseline_bills_all_only_if_its_epoch_began_in_the_window():
    assert deltas([reading(1, 70, since=WINDOW)]) == [70]
    assert deltas([reading(1, 70, since=START)]) == [70]
    assert deltas([reading(1, 70, since=WINDOW - timedelta(microseconds=1))]) == [0]
    assert deltas([reading(1, 70, since=None)]) == [0]


def test_gaps_are_neither_readings_nor_baselines():
    rows = [reading(1, 100), gap(reading(2, 0)), reading(3, 160)]
    assert deltas(rows) == [0, 60]
    # A gap first: the reading after it is still the series' first.
    assert deltas([gap(reading(1, 0)), reading(2, 90, since=START)]) == [90]


def test_copies_of_one_reading_count_once():
    copy = reading(2, 150)
    assert deltas([reading(1, 100), copy, dict(copy), reading(3, 170)]) == [0, 50, 20]


def test_every_counter_gets_its_delta_and_series_are_apart():
    rows = [reading(1, 10), reading(2, 15), reading(1, 5, source="broker:v"),
            reading(2, 9, source="broker:v")]
    kept = live.with_deltas(live.readings(rows), WINDOW)
    assert [(r["source"], r["messages_out_delta"], r["bytes_in_delta"]) for r in kept] == [
        ("broker:v", 0, 0), ("broker:v", 8, 400), ("router:r", 0, 0), ("router:r", 10, 500)]


# Today so far from the store and the rollups -------------------------------------------------

def write(store, rows: list[dict], written_at: datetime) -> None:
    write_samples(rows, str(store), written_at)


def space_row(minute: int, connections: int, space="s1", **extra) -> dict:
    row = reading(minute, 0, address="", **extra)
    return {**row, "kind": "space", "space": space, "connections": connections,
            **dict.fromkeys(COUNTERS, 0)}


def test_today_so_far_adds_the_samples_after_the_cut_to_the_rollups_before_it(tmp_path):
    cut = START + timedelta(hours=11)
    minute = 11 * 60
    # Written long before the lookback: not read, so its huge reading is no baseline.
    write(tmp_path, [reading(minute - 60, 10**6)], cut - timedelta(hours=1))
    write(tmp_path, [reading(minute - 2, 1000), space_row(minute - 2, 9)],
          cut - timedelta(minutes=2))  # a baseline only; its gauge is before the cut
    write(tmp_path, [reading(minute + 1, 1300, stored_bytes=700), space_row(minute + 1, 2),
                     space_row(minute + 1, 4, space="s2"),
                     {**reading(minute + 1, 5), "tenant": "other"}], cut + timedelta(minutes=1))
    write(tmp_path, [reading(minute + 2, 1250), reading(minute + 3, 1400, epoch="e2")],
          cut + timedelta(minutes=3))
    rollups = live.Rollups(
        traffic={"messages_in": 5000, "messages_out": 10000, "bytes_in": 1, "bytes_out": 2},
        peaks={START + timedelta(hours=10): {"stored_bytes": 500, "connections": 3},
               cut: {"stored_bytes": 10**9, "connections": 10**9}})  # at the cut: not used
    today = live.today_so_far(str(tmp_path), "t1", cut=cut, now=cut + timedelta(minutes=4),
                              lookback=timedelta(minutes=5), rollups=rollups)
    # messages_in after the cut: 300 (same epoch), 0 (lower), 1400 (new epoch).
    assert today.traffic["messages_in"] == 5000 + 1700
    assert today.measures == {
        "messages": 5000 + 10000 + 3 * 1700,
        "bytes": 3 + 100 * 1700,
        "stored_bytes": 700,  # 11:00 beats 10:00's 500
        "connections": 6,  # s1 and s2 in the same hour; 11:00's minute with 9 is before the cut
    }
    assert today.files == 3 and today.window_start == cut - timedelta(minutes=5)


def test_files_are_chosen_by_the_time_in_their_names(tmp_path):
    day = tmp_path / f"date={DAY.isoformat()}"
    write(tmp_path, [reading(1, 1)], START + timedelta(minutes=1))
    write(tmp_path, [reading(9, 1)], START + timedelta(minutes=9))
    (day / ".part-20261120T001000-x.parquet.tmp").write_bytes(b"half")
    (day / "other-name.parquet").write_bytes(b"")
    found = live.sample_files(str(tmp_path), START + timedelta(minutes=5),
                              START + timedelta(hours=1))
    assert [p.rsplit("/", 1)[1][:20] for p in found] == ["other-name.parquet",
                                                         "part-20261120T000900"]


# The same as the Spark job ---------------------------------------------------------------

def generate(store, seed: int = 11) -> None:
    """A day of readings every 10 minutes (and the hour before it): restarts, lower readings,
    gaps, copies, series that appear during the day, space rows with traffic and peaks."""
    rng = random.Random(seed)
    series = [(src, tenant, space, kind, addr)
              for tenant in ("t1", "t2") for space in ("s1", "s2")
              for src, kind, addr in [("router:r", "address", "a"), ("router:r", "address", "b"),
                                      (f"broker:{space}", "address", "a"),
                                      (f"broker:{space}", "space", "")]]
    state = {}
    for n, key in enumerate(series):
        appears = START + timedelta(hours=rng.choice([-1, -1, 5, 14]))
        since = rng.choice([None, appears - timedelta(minutes=2)])
        if n % 8 == 0:  # begun just before the cut of 13:00, first read after it
            appears, since = START + timedelta(hours=13), START + timedelta(hours=12, minutes=58)
        state[key] = {"appears": appears, "epoch": 0, "since": since,
                      "counters": dict.fromkeys(COUNTERS, 0)}
    moment = START - timedelta(hours=1)
    while moment < START + timedelta(days=1):
        rows = []
        for key in series:
            s = state[key]
            if moment < s["appears"]:
                continue
            if rng.random() < 0.02:  # the source restarted: a new counter instance
                s["epoch"] += 1
                s["since"], s["counters"] = moment - timedelta(seconds=30), dict.fromkeys(
                    COUNTERS, 0)
            for name in COUNTERS:
                s["counters"][name] += rng.randrange(0, 40) * (100 if "bytes" in name else 1)
            src, tenant, space, kind, addr = key
            row = {"sample_id": uuid.uuid4().hex, "ts": moment + timedelta(
                seconds=rng.randrange(0, 5)), "tenant": tenant, "space": space, "address": addr,
                "source": src, "kind": kind, "epoch": f"{src}#{s['epoch']}",
                "since": s["since"], **s["counters"], **dict.fromkeys(GAUGES, 0)}
            if kind == "address":
                row.update(stored_messages=rng.randrange(0, 9),
                           stored_bytes=rng.randrange(0, 9) * 100)
            else:
                row.update(connections=rng.randrange(0, 6), senders=1, receivers=1)
            luck = rng.random()
            if luck < 0.03:
                row = gap(row)
            elif luck < 0.05:  # a reading lower than the one before, within its epoch
                row.update({name: value // 2 for name, value in s["counters"].items()})
            rows.append(row)
            if rng.random() < 0.05:  # written twice
                rows.append(dict(row))
        if rows:
            write_samples(rows, str(store), moment + timedelta(seconds=20))
        moment += timedelta(minutes=10)


@pytest.fixture(scope="module")
def job(spark, tmp_path_factory):
    store = tmp_path_factory.mktemp("usage")
    generate(store)
    limits = {"tenant": "t1", "messages_per_day": 1, "bytes_per_day": 10**12,
              "stored_bytes": None, "peak_connections": 0}
    tables = nightly.run(spark, str(store), DAY, ["t1", "t2"], [limits], [])
    return str(store), tables, limits


def rollups_before(tables: dict, tenant: str, cut: datetime) -> live.Rollups:
    traffic = dict.fromkeys(COUNTERS, 0)
    for row in tables["address_hourly"]:
        if row["tenant"] == tenant and row["hour"] < cut:
            for name in COUNTERS:
                traffic[name] += row[name]
    peaks: dict = {}
    for row in tables["space_peaks"]:
        if row["tenant"] == tenant and row["hour"] < cut:
            hour = peaks.setdefault(row["hour"], dict.fromkeys(live.PEAKS, 0))
            for name in live.PEAKS:
                hour[name] += row[name]
    return live.Rollups(traffic=traffic, peaks=peaks)


@pytest.mark.parametrize("cut_hour", [0, 13])
@pytest.mark.parametrize("tenant", ["t1", "t2"])
def test_the_tenant_day_equals_the_spark_jobs(job, tenant, cut_hour):
    store, tables, _ = job
    cut = START + timedelta(hours=cut_hour)
    today = live.today_so_far(store, tenant, cut=cut, now=START + timedelta(days=1),
                              lookback=timedelta(minutes=30),
                              rollups=rollups_before(tables, tenant, cut))
    spark_day = next(r for r in tables["tenant_daily"] if r["tenant"] == tenant)
    assert today.measures == {name: spark_day[name] for name in live.MEASURES}
    assert today.measures["messages"] > 0 and today.measures["connections"] > 0


def test_the_breaches_equal_the_spark_jobs(job):
    _, tables, limits = job
    day = next(r for r in tables["tenant_daily"] if r["tenant"] == "t1")
    measures = {name: day[name] for name in live.MEASURES}
    spark_breaches = sorted(
        ({"limit": q["limit"], "used": q["used"], "limit_value": q["limit_value"]}
         for q in tables["quota"] if q["tenant"] == "t1" and q["breached"]),
        key=lambda b: b["limit"])
    assert breaches(measures, limits) == spark_breaches == [
        {"limit": "messages_per_day", "used": day["messages"], "limit_value": 1},
        {"limit": "peak_connections", "used": day["connections"], "limit_value": 0}]


def test_the_breach_rule_is_spark_quotas(spark):
    cases = [(0, None), (5, None), (0, 0), (1, 0), (5, 5), (6, 5), (4, 5), (10**15, 10**15 - 1)]
    daily = spark.createDataFrame(
        [(f"t{i}", used, used, used, used) for i, (used, _) in enumerate(cases)],
        "tenant string, messages long, bytes long, stored_bytes long, connections long")
    quotas = spark.createDataFrame(
        [(f"t{i}", *[limit] * 4) for i, (_, limit) in enumerate(cases)],
        nightly.QUOTAS_SCHEMA)
    history = spark.createDataFrame([], nightly.HISTORY_SCHEMA)
    rows = quota.evaluate(daily, history, quotas, DAY).collect()
    assert set(quota.LIMITS) == set(USAGE_LIMITS) and quota.LIMITS == USAGE_LIMITS
    assert len(rows) == 4 * len(cases)
    for row in rows:
        used, limit = cases[int(row["tenant"][1:])]
        assert row["breached"] == breached(used, limit), (used, limit)
