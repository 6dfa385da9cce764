"""The nightly usage job of one day: rollups per address, space and tenant, then quotas.

`run` returns the result tables as lists of dicts for the Django side to store (it replaces the
day's rows, so a re-run never doubles them). The CLI writes them as Parquet instead, one
partition per day that a re-run overwrites:

    python -m spark.jobs.nightly --samples BASE --day 2026-11-21 --out DIR
    spark-submit spark/jobs/nightly.py --samples s3a://bucket/usage --day ... --out s3a://...
"""
import argparse
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta

from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

if __package__ in (None, ""):  # run as a file by spark-submit: import the package beside it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from spark import quota, usage  # noqa: E402
from spark.session import get_session  # noqa: E402

TABLES = ("address_daily", "address_hourly", "space_peaks", "tenant_daily", "quota")
TENANTS_SCHEMA = T.StructType([T.StructField("tenant", T.StringType())])
QUOTAS_SCHEMA = T.StructType(
    [T.StructField("tenant", T.StringType())]
    + [T.StructField(limit, T.LongType()) for limit in quota.LIMITS]
)
HISTORY_SCHEMA = T.StructType(
    [T.StructField("tenant", T.StringType()), T.StructField("day", T.DateType())]
    + [T.StructField(n, T.LongType()) for n in ("messages", "bytes", "stored_bytes", "connections")]
)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@contextmanager
def rollups(
    spark: SparkSession,
    samples_base: str,
    day: date,
    tenants: DataFrame,
    quotas: DataFrame,
    history: DataFrame,
) -> Iterator[dict[str, DataFrame]]:
    """The day's result DataFrames (TABLES); intermediate results stay cached while inside.

    The samples are read, shuffled and windowed once: whichever table is computed first fills
    the cache of the day's deltas, and every other table is derived from the caches.
    """
    cached: list[DataFrame] = []

    def keep(df: DataFrame) -> DataFrame:
        cached.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return cached[-1]

    try:
        deltas = usage.with_deltas(usage.read_samples(spark, samples_base, day), day)
        readings = keep(usage.rollup_input(deltas, day))
        # Cached before hourly_peaks is built, so that its address counts read this cache.
        address_hourly = keep(usage.hourly_address(readings, day))
        address_daily = keep(usage.daily_from_hourly(address_hourly, day))
        space_peaks = keep(usage.hourly_peaks(readings, day))
        tenant_daily = keep(usage.daily_tenant(address_daily, space_peaks, day, tenants))
        yield {
            "address_daily": address_daily,
            "address_hourly": address_hourly,
            "space_peaks": space_peaks,
            "tenant_daily": tenant_daily,
            "quota": quota.evaluate(tenant_daily, history, quotas, day),
        }
    finally:
        for df in cached:
            df.unpersist()


def run(
    spark: SparkSession,
    samples_base: str,
    day: date,
    tenants: Iterable[str],
    quotas: list[dict],
    history: list[dict],
    tables: Iterable[str] = TABLES,
) -> dict[str, list[dict]]:
    """Computes the day and collects the chosen tables to the driver as lists of dicts.

    quotas: {tenant, messages_per_day, bytes_per_day, stored_bytes, peak_connections} (None:
    no limit); history: earlier tenant_daily rows {tenant, day, messages, bytes, stored_bytes,
    connections}. Timestamps come back as aware UTC datetimes, days as dates.
    """
    tenants_df = spark.createDataFrame([(t,) for t in tenants], TENANTS_SCHEMA)
    quotas_df = spark.createDataFrame(
        [tuple(q.get(f.name) for f in QUOTAS_SCHEMA) for q in quotas], QUOTAS_SCHEMA
    )
    history_df = spark.createDataFrame(
        [tuple(h.get(f.name) for f in HISTORY_SCHEMA) for h in history], HISTORY_SCHEMA
    )
    with rollups(spark, samples_base, day, tenants_df, quotas_df, history_df) as results:
        return {name: collect(results[name]) for name in tables}


def collect(df: DataFrame) -> list[dict]:
    """The rows as dicts; timestamps as aware UTC datetimes (PySpark's own are naive local)."""
    stamps = [f.name for f in df.schema.fields if isinstance(f.dataType, T.TimestampType)]
    # Arrow batches cross from the JVM many times faster than pickled Rows (~1M rows a day).
    records = df.select(
        *[F.unix_micros(F.col(n)).alias(n) if n in stamps else F.col(n) for n in df.columns]
    ).toArrow().to_pylist()
    for record in records:
        for name in stamps:
            if record[name] is not None:
                record[name] = EPOCH + timedelta(microseconds=record[name])
    return records


def write(results: dict[str, DataFrame], out: str, day: date) -> None:
    """Writes each table to <out>/<table>/day=<day>, replacing what a previous run wrote there."""
    for name, df in results.items():
        columns = [c for c in df.columns if c != "day"]
        df.select(*columns).write.mode("overwrite").parquet(f"{out.rstrip('/')}/{name}/day={day}")


def read_history(spark: SparkSession, out: str) -> DataFrame:
    """Earlier tenant_daily partitions written by this CLI (none before it ever ran: then
    nothing is read, and Spark logs no FileNotFoundException)."""
    path = f"{out.rstrip('/')}/tenant_daily"
    if not usage.existing_paths(spark, [path]):
        return spark.createDataFrame([], HISTORY_SCHEMA)
    try:
        df = spark.read.parquet(path)
    except AnalysisException as error:
        if error.getCondition() not in ("PATH_NOT_FOUND", "UNABLE_TO_INFER_SCHEMA"):
            raise
        return spark.createDataFrame([], HISTORY_SCHEMA)
    return df.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in HISTORY_SCHEMA])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", required=True, help="base of the sample store")
    parser.add_argument("--day", required=True, type=date.fromisoformat, help="YYYY-MM-DD")
    parser.add_argument("--out", required=True, help="where the result tables go")
    parser.add_argument("--tenants", help="text file, one tenant slug a line (zero rows)")
    parser.add_argument("--quotas", help="JSON lines: tenant and the four limits")
    parser.add_argument("--history", help="Parquet of earlier tenant_daily rows "
                        "(default: <out>/tenant_daily)")
    args = parser.parse_args(argv)
    spark = get_session("maas-usage-nightly")
    if args.tenants:
        tenants = spark.read.text(args.tenants).select(F.trim("value").alias("tenant"))
        tenants = tenants.where(F.col("tenant") != "")
    else:
        tenants = spark.createDataFrame([], TENANTS_SCHEMA)
    quotas = (
        spark.read.schema(QUOTAS_SCHEMA).json(args.quotas)
        if args.quotas
        else spark.createDataFrame([], QUOTAS_SCHEMA)
    )
    history = (
        spark.read.parquet(args.history).select(*[f.name for f in HISTORY_SCHEMA])
        if args.history
        else read_history(spark, args.out)
    )
    with rollups(spark, args.samples, args.day, tenants, quotas, history) as results:
        write(results, args.out, args.day)


if __name__ == "__main__":
    main()
    get_session().stop()
