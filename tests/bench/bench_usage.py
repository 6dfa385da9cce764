"""Benchmark of the nightly usage job on generated samples, with DuckDB as a yardstick.

Generates N readings of one day (vectorised, numpy + pyarrow; 1,000 tenants x 5 spaces,
100,000 addresses, one broker per space, 1% of the series restarting once) into a temporary
sample store, then times on local[2]: the whole nightly job (every table written as Parquet,
as the CLI does) and the daily_address rollup alone, and the same daily_address in DuckDB
on the same files. Prints figures; asserts nothing. Deletes the data unless --keep.

    .venv/bin/python tests/bench/bench_usage.py [--size 1m|10m|30m] [--dir /tmp]
"""
import argparse
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from spark.samples import write_table  # noqa: E402

SIZES = {"1m": 1_000_000, "10m": 10_000_000, "30m": 30_000_000}
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


def bench_spark(base: str, out: str) -> tuple[float, float, tuple]:
    from spark.jobs import nightly
    from spark.session import get_session
    from spark.usage import daily_address, read_samples, with_deltas

    spark = get_session("maas-usage-bench")
    tenants = spark.read.parquet(f"{base}/date={DAY}").select("tenant").distinct()
    empty_quotas = spark.createDataFrame([], nightly.QUOTAS_SCHEMA)
    empty_history = spark.createDataFrame([], nightly.HISTORY_SCHEMA)
    started, parts = time.monotonic(), []
    with nightly.rollups(spark, base, DAY, tenants, empty_quotas, empty_history) as results:
        for name, df in results.items():  # in order; the first one also fills the cache
            began = time.monotonic()
            nightly.write({name: df}, out, DAY)
            parts.append(f"{name} {time.monotonic() - began:.1f} s")
    whole = time.monotonic() - started
    print("  per table:", ", ".join(parts))
    started = time.monotonic()
    df = daily_address(with_deltas(read_samples(spark, base, DAY), DAY), DAY)
    df.write.mode("overwrite").parquet(f"{out}/daily_address_only")
    alone = time.monotonic() - started
    check = spark.read.parquet(f"{out}/daily_address_only").selectExpr(
        "count(*)", "sum(messages_in)", "sum(bytes_out)", "sum(stored_bytes)").first()
    spark.stop()
    return whole, alone, tuple(check)


DUCKDB_DAILY_ADDRESS = """
COPY (
  WITH s AS (
    SELECT * FROM read_parquet([{files}])
    WHERE ts < TIMESTAMPTZ '{end}'),
  b AS (
    SELECT *, max(CASE WHEN ts < TIMESTAMPTZ '{start}' THEN ts END)
              OVER (PARTITION BY source, tenant, space, kind, address) AS base_ts
    FROM s),
  k AS (
    SELECT DISTINCT ON (source, tenant, space, kind, address, sample_id) *
    FROM b WHERE ts >= TIMESTAMPTZ '{start}' OR ts = base_ts),
  d AS (
    SELECT *, {lags} FROM k
    WINDOW w AS (PARTITION BY source, tenant, space, kind, address ORDER BY ts, sample_id))
  SELECT tenant, space, address, {sums},
         max(stored_messages) AS stored_messages, max(stored_bytes) AS stored_bytes
  FROM d WHERE kind = 'address' AND ts >= TIMESTAMPTZ '{start}'
  GROUP BY tenant, space, address
) TO '{out}' (FORMAT parquet)
"""


def bench_duckdb(base: str, out: str) -> tuple[float, tuple]:
    import duckdb

    counters = ("messages_in", "messages_out", "bytes_in", "bytes_out")
    dates = [DAY + timedelta(days=n) for n in (-1, 0, 1)]
    existing = [d for d in dates if (Path(base) / f"date={d}").is_dir()]
    sql = DUCKDB_DAILY_ADDRESS.format(
        files=", ".join(f"'{base}/date={d}/*.parquet'" for d in existing),
        start=START.isoformat(), end=(START + timedelta(days=1)).isoformat(), out=out,
        lags=", ".join(["lag(epoch) OVER w AS p_epoch",
                        *(f"lag({c}) OVER w AS p_{c}" for c in counters)]),
        sums=", ".join(f"sum(CASE WHEN p_{c} IS NULL THEN 0 WHEN epoch <> p_epoch THEN {c} "
                       f"WHEN {c} >= p_{c} THEN {c} - p_{c} ELSE 0 END) AS {c}"
                       for c in counters),
    )
    con = duckdb.connect()
    con.execute("SET threads = 2; SET TimeZone = 'UTC'")
    started = time.monotonic()
    con.execute(sql)
    elapsed = time.monotonic() - started
    check = con.execute(f"SELECT count(*), sum(messages_in), sum(bytes_out), sum(stored_bytes) "
                        f"FROM '{out}'").fetchone()
    return elapsed, tuple(int(v) for v in check)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=SIZES, default="10m")
    parser.add_argument("--tenants", type=int, default=1_000)
    parser.add_argument("--addresses", type=int, default=100_000)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the data goes")
    parser.add_argument("--skip-duckdb", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the generated data")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_MASTER", "local[2]")
    os.environ.setdefault("SPARK_DRIVER_MEMORY", "8g")
    work = tempfile.mkdtemp(prefix="bench-usage-", dir=args.dir)
    base, out = f"{work}/samples", f"{work}/out"
    try:
        started = time.monotonic()
        n = generate(base, SIZES[args.size], args.tenants, args.addresses)
        generated = time.monotonic() - started
        on_disk = sum(f.stat().st_size for f in Path(base).rglob("*.parquet")) / 1e6
        print(f"generated {n:,} samples ({on_disk:,.0f} MB Parquet) in {generated:.1f} s")
        whole, alone, spark_check = bench_spark(base, out)
        print(f"spark local[2] nightly job, all tables: {whole:.1f} s, {n / whole:,.0f} samples/s")
        print(f"spark local[2] daily_address only:      {alone:.1f} s, {n / alone:,.0f} samples/s")
        print(f"  check (rows, messages_in, bytes_out, stored_bytes): {spark_check}")
        if not args.skip_duckdb:
            elapsed, duck_check = bench_duckdb(base, f"{work}/duckdb_daily_address.parquet")
            print(f"duckdb (2 threads) daily_address:       {elapsed:.1f} s, "
                  f"{n / elapsed:,.0f} samples/s; spark/duckdb = {alone / elapsed:.1f}x")
            print(f"  check: {duck_check} ({'equal' if duck_check == spark_check else 'DIFFERENT'})")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
