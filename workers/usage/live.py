"""One tenant's usage today so far, without Spark: the job's stored rollups of the hours before
`cut` plus the samples written since, by the job's own rules (docs/usage.md, "Definitions").

Pure Python and pyarrow (no JVM, no Django), so a quota change is re-evaluated in well under a
second; workers/usage/live_quota.py feeds it from the database and acts on the result. The Spark
job (spark/usage.py) stays the authority: tests/spark/test_live.py checks both agree.
"""
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

import pyarrow.dataset as ds

from spark.samples import COUNTERS, SCHEMA

SERIES = ("source", "tenant", "space", "kind", "address")
DELTAS = tuple(f"{name}_delta" for name in COUNTERS)
# spark.samples.write_table names each file by the time it was written.
FILE_NAME = re.compile(r"^part-(\d{8}T\d{6})-[0-9a-f]+\.parquet$")
# The tenant day's measures (docs/usage.md, "Tenant day"): traffic sums, and hourly peaks.
MEASURES = ("messages", "bytes", "stored_bytes", "connections")
PEAKS = ("stored_bytes", "connections")


@dataclass(frozen=True)
class Rollups:
    """What the usage job stored for the hours before the cut, summed over the tenant's rows:
    traffic counters (AddressUsageHourly) and per hour the sum of its spaces' peaks
    (SpacePeakHourly)."""

    traffic: dict[str, int] = field(default_factory=dict)
    peaks: dict[datetime, dict[str, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class TodaySoFar:
    """A tenant's day from its start to now: the measures its quota limits are checked against."""

    cut: datetime
    window_start: datetime
    files: int
    readings: int
    traffic: dict[str, int]
    peaks: dict[datetime, dict[str, int]]

    @property
    def measures(self) -> dict[str, int]:
        """messages and bytes (in + out), and the highest hourly stored_bytes and connections."""
        return {
            "messages": self.traffic["messages_in"] + self.traffic["messages_out"],
            "bytes": self.traffic["bytes_in"] + self.traffic["bytes_out"],
            **{name: max((p[name] for p in self.peaks.values()), default=0) for name in PEAKS},
        }


def day_start(day: date) -> datetime:
    return datetime.combine(day, datetime.min.time(), tzinfo=UTC)


def hour_of(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


# Reading the store --------------------------------------------------------------------------

def sample_files(base: str, since: datetime, until: datetime) -> list[str]:
    """The sample files written from `since` on, in the date directories up to `until`, chosen by
    the time in their names; a file whose name carries no time is read (it may hold anything)."""
    stamp = since.astimezone(UTC).strftime("%Y%m%dT%H%M%S")
    paths = []
    day = since.astimezone(UTC).date()
    while day <= until.astimezone(UTC).date():
        directory = os.path.join(base, f"date={day.isoformat()}")
        names = sorted(os.listdir(directory)) if os.path.isdir(directory) else []
        for name in names:
            if name.startswith((".", "_")) or not name.endswith(".parquet"):
                continue  # being written (renamed when complete), or not a sample file
            found = FILE_NAME.match(name)
            if found is None or found.group(1) >= stamp:
                paths.append(os.path.join(directory, name))
        day += timedelta(days=1)
    return paths


def read_tenant(paths: list[str], tenant: str) -> list[dict]:
    """The tenant's rows of those files; only they are materialised (a pyarrow filter). Files
    written before `epoch` and `since` existed read them as null, as Spark does."""
    if not paths:
        return []
    dataset = ds.dataset(paths, schema=SCHEMA, format="parquet")
    return dataset.to_table(filter=ds.field("tenant") == tenant).to_pylist()


# The job's rules, row by row -----------------------------------------------------------------

def readings(rows: list[dict]) -> list[dict]:
    """The readings of a window, as spark.usage.select_day keeps them: gaps dropped, a null epoch
    taken as "", sorted by series and (ts, sample_id), copies of one reading once."""
    kept = [{**row, "epoch": row.get("epoch") or ""} for row in rows
            if row["messages_in"] is not None]
    kept.sort(key=lambda r: (*(r[k] for k in SERIES), r["ts"], r["sample_id"]))
    out: list[dict] = []
    for row in kept:
        previous = out[-1] if out else None
        if (previous is not None and previous["sample_id"] == row["sample_id"]
                and all(previous[k] == row[k] for k in SERIES)):
            continue  # a copy sorts right after its original
        out.append(row)
    return out


def with_deltas(sorted_readings: list[dict], window_start: datetime) -> list[dict]:
    """Each reading with `<counter>_delta` (spark.usage.with_deltas): growth beyond the highest
    earlier reading of its epoch; all of it for an epoch not seen before in its series; for the
    series' first reading, all of it only if its epoch began at or after `window_start`."""
    out = []
    series, highest = None, {}
    for row in sorted_readings:
        key = tuple(row[k] for k in SERIES)
        first = key != series
        if first:
            series, highest = key, {}
        top = highest.get(row["epoch"])
        known_start = row["since"] is not None and row["since"] >= window_start
        deltas = {}
        for name, delta in zip(COUNTERS, DELTAS, strict=True):
            if first:
                deltas[delta] = row[name] if known_start else 0
            elif top is None:
                deltas[delta] = row[name]  # a new counter instance: all of it is new
            else:
                # Lower than before within one epoch is no reset: it bills nothing, and the
                # next reading is compared with the highest, so nothing is billed twice.
                deltas[delta] = max(row[name] - top[name], 0)
        highest[row["epoch"]] = {n: max(row[n], top[n]) if top else row[n] for n in COUNTERS}
        out.append({**row, **deltas})
    return out


def traffic(deltas: list[dict], start: datetime, end: datetime) -> dict[str, int]:
    """The counters' deltas of the readings in [start, end), over address rows and the space
    rows that carry traffic (spark.usage._address_rows)."""
    sums = dict.fromkeys(COUNTERS, 0)
    for row in deltas:
        moved = sum(row[d] for d in DELTAS)
        if start <= row["ts"] < end and (row["kind"] == "address"
                                         or (row["kind"] == "space" and moved > 0)):
            for name, delta in zip(COUNTERS, DELTAS, strict=True):
                sums[name] += row[delta]
    return sums


def hourly_peaks(rows: list[dict], start: datetime, end: datetime) -> dict[datetime, dict]:
    """Per hour in [start, end), the sum over the tenant's spaces of their peaks (spark.usage
    hourly_peaks, then daily_tenant's sum per hour): per series the highest gauge in a minute,
    summed per space and minute, the space's highest minute of the hour."""
    per_minute: dict[tuple, dict[str, int]] = {}
    for row in rows:
        if not start <= row["ts"] < end:
            continue
        minute = row["ts"].replace(second=0, microsecond=0)
        gauges = {"stored_bytes": row["stored_bytes"] if row["kind"] == "address" else 0,
                  "connections": row["connections"] if row["kind"] == "space" else 0}
        top = per_minute.setdefault((*(row[k] for k in SERIES), minute), dict.fromkeys(PEAKS, 0))
        for name in PEAKS:
            top[name] = max(top[name], gauges[name])
    space_minute: dict[tuple, dict[str, int]] = defaultdict(lambda: dict.fromkeys(PEAKS, 0))
    for (_, _, space, _, _, minute), gauges in per_minute.items():
        for name in PEAKS:
            space_minute[(space, minute)][name] += gauges[name]
    space_hour: dict[tuple, dict[str, int]] = defaultdict(lambda: dict.fromkeys(PEAKS, 0))
    for (space, minute), gauges in space_minute.items():
        for name in PEAKS:
            peak = space_hour[(space, hour_of(minute))]
            peak[name] = max(peak[name], gauges[name])
    tenant_hour: dict[datetime, dict[str, int]] = defaultdict(lambda: dict.fromkeys(PEAKS, 0))
    for (_, hour), gauges in space_hour.items():
        for name in PEAKS:
            tenant_hour[hour][name] += gauges[name]
    return dict(tenant_hour)


# Today so far ------------------------------------------------------------------------------

def today_so_far(base: str, tenant: str, *, cut: datetime, now: datetime, lookback: timedelta,
                 rollups: Rollups) -> TodaySoFar:
    """The tenant's day up to `now`: `rollups` for the hours before `cut` (an hour's start, not
    before the day's), the samples for the rest. The files written from `cut - lookback` on are
    read: their readings before `cut` are only baselines, and that is the window whose start
    decides whether a series' first reading bills all of it (as D-1 00:00 does for the job)."""
    end = day_start(cut.date()) + timedelta(days=1)
    window_start = cut - lookback
    paths = sample_files(base, window_start, now)
    found = readings(read_tenant(paths, tenant))
    deltas = with_deltas(found, window_start)
    live = traffic(deltas, cut, end)
    totals = {name: rollups.traffic.get(name, 0) + live[name] for name in COUNTERS}
    peaks = {hour: dict(p) for hour, p in rollups.peaks.items() if hour < cut}
    peaks.update(hourly_peaks(found, cut, end))
    return TodaySoFar(cut=cut, window_start=window_start, files=len(paths),
                      readings=len(found), traffic=totals, peaks=peaks)
