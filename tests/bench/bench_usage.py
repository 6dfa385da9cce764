"""Benchmark of the nightly usage job on generated samples, with DuckDB as a yardstick.

Generates N readings of one day (vectorised, numpy + pyarrow; 1,000 tenants x 5 spaces,
100,000 addresses, one broker per space, 1% of the series restarting once) into a temporary
sample store, then times on local[2]: the whole nightly job (every table written as Parquet,
as the CLI does) and the daily_address rollup alone, and the same daily_address in DuckDB
on the same files, by the rules of docs/usage.md written again in SQL: the two daily_address
tables must be equal row for row, or the bench says DIFFERENT and exits 1. Prints figures,
the machine's load average before and after, and the CPU time the JVM spent compiling (JIT);
with --stages, where daily_address's and space_peaks' time goes, per Spark stage (from Spark's
event log: wall time, CPU, shuffle written, spilled to disk).
With --cluster, the same on a standalone Spark cluster of this machine (a master and two
workers of one core each from pyspark's distribution, tests/spark/cluster.py) instead of
local[2], and the peak resident memory of each process (driver, master, workers, executors).
Deletes the data unless --keep.

    .venv/bin/python tests/bench/bench_usage.py [--size 1m|10m|30m|100m] [--dir /tmp]
        [--stages] [--cluster] [--skip-duckdb]
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from spark.samples import write_table  # noqa: E402

SIZES = {"1m": 1_000_000, "10m": 10_000_000, "30m": 30_000_000, "100m": 100_000_000}
DAY = date(2026, 11, 20)
START = datetime.combine(DAY, datetime.min.time(), tzinfo=UTC)
SPACES_PER_TENANT = 5
HEX = np.frombuffer(b"0123456789abcdef", dtype="S1")


def sample_ids(rng: np.random.Generator, n: int) -> pa.Array:
    """n random uuid4 hex strings without a Python loop."""
    raw = rng.integers(0, 256, size=(n, 16), dtype=np.uint8)
    raw[:, 6] = (raw[:, 6] & 0x0F) | 0x40
    raw[:, 8] = (raw[:, 8] & 0x3F) | 0x80
    chars = np.empty((n, 32), dtype="S1")
    chars[:, 0::2], chars[:, 1::2] = HEX[raw >> 4], HEX[raw & 0x0F]
    return pa.array(chars.view("S32").ravel(), type=pa.binary()).cast(pa.string())


def generate(base: str, rows: int, tenants: int, addresses: int, seed: int = 5) -> int:
    """Writes about `rows` readings of DAY; returns how many it wrote."""
    rng = np.random.default_rng(seed)
    spaces = tenants * SPACES_PER_TENANT
    n_series = addresses + spaces
    readings = max(2, rows // n_series)
    interval = 86_400 / readings
    # Series 0..addresses-1 are addresses, the rest space rows; addresses spread over spaces.
    space_of = np.concatenate([np.arange(addresses) % spaces, np.arange(spaces)])
    is_address = np.arange(n_series) < addresses
    tenant_names = pa.array([f"tenant-{t:04d}" for t in range(tenants)])
    space_names = pa.array([f"space-{s % SPACES_PER_TENANT}" for s in range(spaces)])
    address_names = pa.array([f"queue-{a:06d}" for a in range(addresses)] + [""] * spaces)
    sources = pa.array([f"broker:tenant-{s // SPACES_PER_TENANT:04d}-{s % SPACES_PER_TENANT}"
                        for s in range(spaces)])
    tenant_idx = pa.array(space_of // SPACES_PER_TENANT)
    series_tenant = tenant_names.take(tenant_idx)
    series_space = space_names.take(pa.array(space_of))
    series_source = sources.take(pa.array(space_of))
    series_kind = pa.array(np.where(is_address, "address", "space"))
    offset = rng.uniform(0, interval, n_series)
    rate = rng.integers(0, 200, n_series) * is_address
    size = rng.integers(100, 2_000, n_series)
    reset_at = np.where(rng.random(n_series) < 0.01, rng.integers(1, readings, n_series), -1)
    per_file = max(1, 1_000_000 // n_series)
    written = 0
    for first in range(0, readings, per_file):
        r = np.repeat(np.arange(first, min(readings, first + per_file)), n_series)
        s = np.tile(np.arange(n_series), len(r) // n_series)
        n = len(r)
        restarted = (reset_at[s] >= 0) & (r >= reset_at[s])
        since = np.where(restarted, r - reset_at[s], r)
        messages_in = since * rate[s] + rng.integers(0, 3, n) * is_address[s]
        messages_out = np.maximum(0, messages_in - rng.integers(0, 50, n))
        stored = (messages_in - messages_out) * is_address[s]
        links = rng.integers(0, 40, n) * ~is_address[s]
        micros = ((r * interval + offset[s]) * 1e6).astype(np.int64)
        ts = pa.array(micros + int(START.timestamp() * 1e6), type=pa.timestamp("us", tz="UTC"))
        take = pa.array(s)
        table = pa.table({
            "sample_id": sample_ids(rng, n), "ts": ts,
            "tenant": series_tenant.take(take), "space": series_space.take(take),
            "address": address_names.take(take), "source": series_source.take(take),
            "kind": series_kind.take(take),
            "messages_in": messages_in, "messages_out": messages_out,
            "bytes_in": messages_in * size[s], "bytes_out": messages_out * size[s],
            "stored_messages": stored, "stored_bytes": stored * size[s],
            "connections": links, "senders": links // 2, "receivers": links // 3,
            # A restarted source is a new counter instance (epoch); its start is not given.
            "epoch": pa.array(np.where(restarted, "e1", "e0")),
            "since": pa.nulls(n, type=pa.timestamp("us", tz="UTC")),
        })
        write_table(table, base, START + timedelta(seconds=first * interval))
        written += n
    return written


def bench_spark(base: str, out: str, partitions: int | None = None) -> tuple[float, float, tuple]:
    from spark.jobs import nightly
    from spark.results import write_days
    from spark.session import get_session
    from spark.usage import daily_address, read_samples, with_deltas

    spark = get_session("maas-usage-bench")
    if partitions:
        spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    tenants = spark.read.parquet(f"{base}/date={DAY}").select("tenant").distinct()
    empty_quotas = spark.createDataFrame([], nightly.QUOTAS_SCHEMA)
    empty_history = spark.createDataFrame([], nightly.HISTORY_SCHEMA)
    started, parts = time.monotonic(), []
    with nightly.rollups(spark, base, DAY, tenants, empty_quotas, empty_history) as results:
        for name, df in results.items():  # in order; the first one also fills the cache
            began = time.monotonic()
            spark.sparkContext.setJobDescription(name)
            write_days({name: df}, out, DAY)
            parts.append(f"{name} {time.monotonic() - began:.1f} s")
    whole = time.monotonic() - started
    print("  per table:", ", ".join(parts))
    print(f"  JIT compilation so far: {jit_seconds(spark):.1f} s of CPU")
    started = time.monotonic()
    spark.sparkContext.setJobDescription(ALONE)
    df = daily_address(with_deltas(read_samples(spark, base, DAY), DAY), DAY)
    df.write.mode("overwrite").parquet(f"{out}/daily_address_only")
    alone = time.monotonic() - started
    spark.sparkContext.setJobDescription(None)
    check = spark.read.parquet(f"{out}/daily_address_only").selectExpr(
        "count(*)", "sum(messages_in)", "sum(bytes_out)", "sum(stored_bytes)").first()
    spark.stop()
    return whole, alone, tuple(check)


ALONE = "daily_address alone"


class PeakMemory:
    """Samples, every second, the peak resident memory (VmHWM) of the cluster's JVMs and of
    this process's own (the driver's JVM is its child): a process's last reading is its peak,
    also for executors that end with the application."""

    def __init__(self, cluster):
        self.cluster, self.peaks, self.roles = cluster, {}, {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _driver_jvms(self) -> list[int]:
        children = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
        pids = [int(p) for p in children.read_text().split()] if children.exists() else []
        return [p for p in pids if Path(f"/proc/{p}/cmdline").exists()
                and b"java" in Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0]]

    def _run(self) -> None:
        from tests.spark.cluster import peak_rss_mb

        while True:
            found = self.cluster.processes()
            ours = {pid for pids in found.values() for pid in pids}
            # The master's and workers' JVMs are this process's children too.
            found["driver (JVM)"] = [p for p in self._driver_jvms() if p not in ours]
            for role, pids in found.items():
                for pid in pids:
                    peak = peak_rss_mb(pid)
                    if peak is not None:
                        self.peaks[pid], self.roles[pid] = peak, role
            if self.stopped.wait(1):
                return

    def report(self) -> list[str]:
        self.stopped.set()
        self.thread.join(10)
        import resource

        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        lines = [f"driver (Python, which generated the samples too): {own:,.0f} MB"]
        for pid, peak in sorted(self.peaks.items(), key=lambda item: self.roles[item[0]]):
            lines.append(f"{self.roles[pid]} {pid}: {peak:,.0f} MB")
        return lines


def jit_seconds(spark) -> float:
    """CPU time the driver's JVM has spent compiling (its JIT), in seconds."""
    management = spark._jvm.java.lang.management.ManagementFactory
    return management.getCompilationMXBean().getTotalCompilationTime() / 1000


def stages(events: Path, description: str) -> list[str]:
    """The stages of the jobs described so, from Spark's event log: wall time, tasks' CPU,
    shuffle written and the operators (the stage's RDD scopes)."""
    jobs, lines = {}, []
    for log in events.iterdir():
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event["Event"] == "SparkListenerJobStart":
                if event.get("Properties", {}).get("spark.job.description") == description:
                    jobs.update(dict.fromkeys(event["Stage IDs"], True))
            elif event["Event"] == "SparkListenerStageCompleted":
                info = event["Stage Info"]
                if info["Stage ID"] not in jobs or "Submission Time" not in info:
                    continue
                metrics = {m["Name"]: m.get("Value", 0) for m in info.get("Accumulables", [])}
                scopes = []
                for rdd in info["RDD Info"]:
                    name = json.loads(rdd["Scope"])["name"].strip() if rdd.get("Scope") else ""
                    if name and not name.startswith(("WholeStageCodegen", "mapPartitions")) \
                            and name not in scopes:
                        scopes.append(name)
                lines.append(
                    f"stage {info['Stage ID']}: "
                    f"{(info['Completion Time'] - info['Submission Time']) / 1000:.1f} s, "
                    f"CPU {int(metrics.get('internal.metrics.executorCpuTime', 0)) / 1e9:.1f} s, "
                    f"shuffle written "
                    f"{int(metrics.get('internal.metrics.shuffle.write.bytesWritten', 0)) / 1e6:.0f}"
                    f" MB, spilled to disk "
                    f"{int(metrics.get('internal.metrics.diskBytesSpilled', 0)) / 1e6:.0f}"
                    f" MB: {', '.join(reversed(scopes))}")
    return lines


# daily_address by the rules of docs/usage.md ("Definitions"), as spark/usage.py applies them:
# gaps (null counters) are no reading; each series' baseline is its last reading before the day,
# with the highest counters of that reading's epoch; copies of a reading count once; a delta is
# what a counter grew beyond the highest earlier reading of its epoch (never negative), all of a
# new epoch's first reading, and for a series' first reading all of it only when its epoch began
# (`since`) within the window read (from the day before), else nothing.
DUCKDB_DAILY_ADDRESS = """
COPY (
  WITH raw AS (
    SELECT sample_id, ts, source, tenant, space, kind, address, coalesce(epoch, '') AS epoch,
           since, {counters}, stored_messages, stored_bytes
    FROM read_parquet([{files}], union_by_name = true)
    WHERE messages_in IS NOT NULL AND ts < TIMESTAMPTZ '{end}'),
  earlier AS (
    SELECT *, {highest_in_epoch},
           row_number() OVER (PARTITION BY {series}, epoch ORDER BY ts DESC, sample_id DESC)
             AS nth_in_epoch
    FROM raw WHERE ts < TIMESTAMPTZ '{start}'),
  baselines AS (
    SELECT sample_id, ts, {series}, epoch, since, {epoch_highest}, stored_messages, stored_bytes
    FROM earlier WHERE nth_in_epoch = 1
    QUALIFY row_number() OVER (PARTITION BY {series} ORDER BY ts DESC, sample_id DESC) = 1),
  readings AS (
    SELECT sample_id, ts, {series}, epoch, since, {counters}, stored_messages, stored_bytes
    FROM raw WHERE ts >= TIMESTAMPTZ '{start}'
    UNION ALL SELECT sample_id, ts, {series}, epoch, since, {counters}, stored_messages,
                     stored_bytes FROM baselines),
  once AS (
    SELECT * FROM readings
    QUALIFY lag(sample_id) OVER (PARTITION BY {series} ORDER BY ts, sample_id)
            IS DISTINCT FROM sample_id),
  d AS (
    SELECT *, lag(epoch) OVER (PARTITION BY {series} ORDER BY ts, sample_id) AS p_epoch,
           {highest_before}
    FROM once),
  deltas AS (
    SELECT *, {deltas} FROM d WHERE ts >= TIMESTAMPTZ '{start}')
  SELECT tenant, space, address, {sums},
         max(stored_messages) AS stored_messages, max(stored_bytes) AS stored_bytes
  FROM deltas WHERE kind = 'address' OR (kind = 'space' AND {moved} > 0)
  GROUP BY tenant, space, address
) TO '{out}' (FORMAT parquet)
"""
COUNTERS = ("messages_in", "messages_out", "bytes_in", "bytes_out")
SERIES = "source, tenant, space, kind, address"
COMPARED = "tenant, space, address, " + ", ".join(COUNTERS) + ", stored_messages, stored_bytes"


def duckdb_daily_address_sql(base: str, out: str) -> str:
    dates = [DAY + timedelta(days=n) for n in (-1, 0, 1)]
    existing = [d for d in dates if (Path(base) / f"date={d}").is_dir()]
    window_start = START - timedelta(days=1)  # spark.usage.window_start
    return DUCKDB_DAILY_ADDRESS.format(
        files=", ".join(f"'{base}/date={d}/*.parquet'" for d in existing),
        start=START.isoformat(), end=(START + timedelta(days=1)).isoformat(), out=out,
        series=SERIES, counters=", ".join(COUNTERS),
        highest_in_epoch=", ".join(f"max({c}) OVER (PARTITION BY {SERIES}, epoch) AS h_{c}"
                                   for c in COUNTERS),
        epoch_highest=", ".join(f"h_{c} AS {c}" for c in COUNTERS),
        highest_before=", ".join(
            f"max({c}) OVER (PARTITION BY {SERIES}, epoch ORDER BY ts, sample_id ROWS BETWEEN "
            f"UNBOUNDED PRECEDING AND 1 PRECEDING) AS h_{c}" for c in COUNTERS),
        deltas=", ".join(
            f"CASE WHEN p_epoch IS NULL THEN (CASE WHEN since IS NOT NULL AND since >= "
            f"TIMESTAMPTZ '{window_start.isoformat()}' THEN {c} ELSE 0 END) "
            f"WHEN h_{c} IS NULL THEN {c} ELSE greatest({c} - h_{c}, 0) END AS d_{c}"
            for c in COUNTERS),
        sums=", ".join(f"sum(d_{c}) AS {c}" for c in COUNTERS),
        moved=" + ".join(f"d_{c}" for c in COUNTERS),
    )


DUCKDB_MEMORY = "6GB"


def bench_duckdb(base: str, out: str) -> tuple[float, tuple]:
    import duckdb

    con = duckdb.connect()
    # Memory as Spark has it (two executors of 3g, or a driver's): DuckDB's default, 80% of the
    # machine's, had it killed at --size 100m beside the cluster; beyond it, it spills.
    con.execute(f"SET threads = 2; SET TimeZone = 'UTC'; SET memory_limit = '{DUCKDB_MEMORY}'; "
                f"SET temp_directory = '{out}.tmp'; SET preserve_insertion_order = false")
    started = time.monotonic()
    con.execute(duckdb_daily_address_sql(base, out))
    elapsed = time.monotonic() - started
    check = con.execute(f"SELECT count(*), sum(messages_in), sum(bytes_out), sum(stored_bytes) "
                        f"FROM '{out}'").fetchone()
    return elapsed, tuple(int(v) for v in check)


def rows_differing(spark_out: str, duck_out: str) -> int:
    """Rows of one daily_address that the other lacks, both ways (0: the same table)."""
    import duckdb

    con = duckdb.connect()
    spark_rows = f"SELECT {COMPARED} FROM read_parquet('{spark_out}/**/*.parquet')"
    duck_rows = f"SELECT {COMPARED} FROM '{duck_out}'"
    return con.execute(f"SELECT (SELECT count(*) FROM ({spark_rows} EXCEPT ALL {duck_rows})) + "
                       f"(SELECT count(*) FROM ({duck_rows} EXCEPT ALL {spark_rows}))").fetchone()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=SIZES, default="10m")
    parser.add_argument("--tenants", type=int, default=1_000)
    parser.add_argument("--addresses", type=int, default=100_000)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the data goes")
    parser.add_argument("--skip-duckdb", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the generated data")
    parser.add_argument("--stages", action="store_true",
                        help="Spark's event log on: daily_address's time per stage")
    parser.add_argument("--cluster", action="store_true",
                        help="on a standalone cluster of two one-core workers, not local[2]")
    parser.add_argument("--executor-memory", default="3g", help="with --cluster")
    parser.add_argument("--partitions", type=int,
                        help="shuffle partitions (default: spark/session.py's)")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_MASTER", "local[2]")
    os.environ.setdefault("SPARK_DRIVER_MEMORY", "2g" if args.cluster else "8g")
    work = tempfile.mkdtemp(prefix="bench-usage-", dir=args.dir)
    base, out, events = f"{work}/samples", f"{work}/out", Path(work) / "events"
    submit = []
    if args.stages:
        events.mkdir()
        submit += [f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir=file://{events}",
                   "--conf spark.eventLog.compress=false --conf spark.eventLog.rolling.enabled=false"]
    cluster = memory = None
    if args.cluster:
        from tests.spark.cluster import Cluster

        memory_mb = int(args.executor_memory.rstrip("g")) * 1024 + 512
        cluster = Cluster(Path(work) / "cluster", workers=2, cores=1, memory=f"{memory_mb}m")
        os.environ["SPARK_MASTER"] = cluster.url
        submit.append(f"--conf spark.executor.memory={args.executor_memory}")
    if submit:
        os.environ["PYSPARK_SUBMIT_ARGS"] = " ".join([*submit, "pyspark-shell"])
    where = "cluster (2 workers x 1 core)" if args.cluster else "local[2]"
    print("load average: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    failed = False
    try:
        started = time.monotonic()
        n = generate(base, SIZES[args.size], args.tenants, args.addresses)
        generated = time.monotonic() - started
        on_disk = sum(f.stat().st_size for f in Path(base).rglob("*.parquet")) / 1e6
        print(f"generated {n:,} samples ({on_disk:,.0f} MB Parquet) in {generated:.1f} s")
        if cluster is not None:
            memory = PeakMemory(cluster)
        whole, alone, spark_check = bench_spark(base, out, args.partitions)
        print(f"spark {where} nightly job, all tables: {whole:.1f} s, "
              f"{n / whole:,.0f} samples/s")
        print(f"spark {where} daily_address only: {alone:.1f} s, {n / alone:,.0f} samples/s")
        print(f"  check (rows, messages_in, bytes_out, stored_bytes): {spark_check}")
        if memory is not None:
            print("peak resident memory per process:")
            print("\n".join(f"  {line}" for line in memory.report()))
        if args.stages:
            for description in (ALONE, "space_peaks"):
                print(f"  stages of {description}:")
                print("\n".join(f"    {line}" for line in stages(events, description)))
        if not args.skip_duckdb:
            duck_out = f"{work}/duckdb_daily_address.parquet"
            elapsed, duck_check = bench_duckdb(base, duck_out)
            print(f"duckdb (2 threads, {DUCKDB_MEMORY}) daily_address: {elapsed:.1f} s, "
                  f"{n / elapsed:,.0f} samples/s; spark/duckdb = {alone / elapsed:.2f}x")
            differing = rows_differing(f"{out}/daily_address_only", duck_out)
            print(f"  check: {duck_check}; rows that differ from Spark's: {differing:,}")
            if differing or duck_check != spark_check:
                print("DIFFERENT: DuckDB's daily_address is not Spark's", file=sys.stderr)
                failed = True
    finally:
        if cluster is not None:
            cluster.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("load average: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
