"""The nightly usage job of one day: rollups per address, space and tenant, then quotas.

`run` has the executors write the result tables as Parquet beside the sample store and returns
their rows, read back in batches without Spark, for the Django side to store (it replaces the
day's rows, so a re-run never doubles them): nothing that grows with the fleet is collected to
the driver. The CLI writes them as Parquet too, one partition per day that a re-run overwrites:

    python -m spark.jobs.nightly --samples BASE --day 2026-11-21 --out DIR
    spark-submit spark/jobs/nightly.py --samples s3a://bucket/usage --day ... --out s3a://...
"""
import argparse
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import date

from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

if __package__ in (None, ""):  # run as a file by spark-submit: import the package beside it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from spark import quota, usage  # noqa: E402
from spark.results import Rows, write_days, write_last  # noqa: E402
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
RESULTS = "_results"  # under the sample store: Spark never reads "_" directories as samples


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

    The address tables and the space peaks each read the samples once (a cache of the readings
    would cost more than reading the files again); every other table is derived from caches.
    """
    cached: list[DataFrame] = []

    def keep(df: DataFrame) -> DataFrame:
        cached.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return cached[-1]

    try:
        samples = usage.read_samples(spark, samples_base, day)
        address_hourly = keep(usage.hourly_address(usage.with_deltas(samples, day)))
        address_daily = keep(usage.daily_from_hourly(address_hourly, day))
        space_peaks = keep(usage.hourly_peaks(samples, address_hourly, day))
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
    out: str | None = None,
) -> dict[str, Rows]:
    """Computes the day; the executors write the chosen tables under `out` (default
    <samples_base>/_results, a path the driver's host and every executor reach), replacing
    the previous run's, and each table's rows are read from there as dicts when iterated.

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
    out = out or f"{samples_base.rstrip('/')}/{RESULTS}"
    with rollups(spark, samples_base, day, tenants_df, quotas_df, history_df) as results:
        return write_last({name: results[name] for name in tables}, out)


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
        write_days(results, args.out, args.day)


if __name__ == "__main__":
    main()
    get_session().stop()
