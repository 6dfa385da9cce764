"""Usage rollups of the sample store: counter deltas, per address, per space and per tenant.

Every transform is pure (DataFrame in, DataFrame out); only `read_samples` touches storage.
Times are UTC instants: days and hours are cut on epoch seconds, whatever the session's zone.
Definitions (docs/usage.md):
- a series is one counter source for one address or space: (source, tenant, space, kind,
  address); its counters are cumulative and restart from zero when the source restarts;
- delta = cur - prev when cur >= prev, else cur (the source restarted); the first reading of a
  series with no earlier reading (baseline) contributes 0, since its start is unknown;
- gauges of several readings in one minute count once per series (their maximum) and are
  summed over series (addresses, sources) before taking peaks.
"""
from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .samples import COUNTERS, GAUGES, SCHEMA

SERIES = ("source", "tenant", "space", "kind", "address")
COLUMNS = tuple(SCHEMA.names)
DELTAS = tuple(f"{name}_delta" for name in COUNTERS)
SPARK_SCHEMA = T.StructType(
    [T.StructField(name, T.StringType()) for name in COLUMNS[:1]]
    + [T.StructField("ts", T.TimestampType())]
    + [T.StructField(name, T.StringType()) for name in COLUMNS[2:7]]
    + [T.StructField(name, T.LongType()) for name in COUNTERS + GAUGES]
)
ADDRESS_KEYS = ("tenant", "space", "address")


def day_start(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def read_samples(spark: SparkSession, base: str, day: date) -> DataFrame:
    """The readings that `day` needs, deduplicated: its own and each series' baseline.

    Reads the files written on day-1, day and day+1 (late readings land a day later); a series
    whose last earlier reading is older than that has no baseline on `day`.
    """
    dates = ",".join((day + timedelta(days=n)).isoformat() for n in (-1, 0, 1))
    try:
        raw = spark.read.schema(SPARK_SCHEMA).parquet(f"{base.rstrip('/')}/date={{{dates}}}")
    except AnalysisException as error:
        if error.getCondition() != "PATH_NOT_FOUND":
            raise
        raw = spark.createDataFrame([], SPARK_SCHEMA)
    return select_day(raw, day)


def select_day(samples: DataFrame, day: date) -> DataFrame:
    """Keeps the readings of `day` and the last reading before it per series, once each."""
    start, end = F.lit(day_start(day)), F.lit(day_start(day + timedelta(days=1)))
    baseline = F.max(F.when(F.col("ts") < start, F.col("ts"))).over(Window.partitionBy(*SERIES))
    return (
        samples.select(*COLUMNS)
        .where(F.col("ts") < end)
        .withColumn("_baseline", baseline)
        .where((F.col("ts") >= start) | (F.col("ts") == F.col("_baseline")))
        # Copies of one reading share its series: deduplicating inside the series' partitioning
        # costs no second shuffle, unlike a bare dropDuplicates(["sample_id"]).
        .dropDuplicates([*SERIES, "sample_id"])
        .select(*COLUMNS)
    )


def with_deltas(samples: DataFrame) -> DataFrame:
    """Adds `<counter>_delta` per reading: what the counter grew since the series' previous one."""
    ordered = Window.partitionBy(*SERIES).orderBy("ts", "sample_id")
    deltas = []
    for name, delta in zip(COUNTERS, DELTAS, strict=True):
        cur, prev = F.col(name), F.lag(name).over(ordered)
        deltas.append(
            F.when(prev.isNull(), F.lit(0).cast("long"))
            .when(cur >= prev, cur - prev)
            .otherwise(cur)  # the source restarted from zero
            .alias(delta)
        )
    return samples.select(*COLUMNS, *deltas)


def daily_address(deltas: DataFrame, day: date) -> DataFrame:
    """Per (tenant, space, address) on `day`: messages and bytes in and out, peak stored."""
    return (
        _address_rows(deltas, day)
        .groupBy(*ADDRESS_KEYS)
        .agg(*_address_measures())
        .select(*ADDRESS_KEYS, F.lit(day).alias("day"), *_address_names())
    )


def hourly_address(deltas: DataFrame, day: date) -> DataFrame:
    """The same as daily_address per hour (`hour`: the hour's start, a UTC timestamp)."""
    return (
        _address_rows(deltas, day)
        .withColumn("hour", _hour(F.unix_seconds("ts")))
        .groupBy(*ADDRESS_KEYS, "hour")
        .agg(*_address_measures())
        .select(*ADDRESS_KEYS, "hour", *_address_names())
    )


def hourly_peaks(deltas: DataFrame, day: date) -> DataFrame:
    """Per (tenant, space, hour): peak connections, senders, receivers and stored bytes, and the
    number of distinct addresses that reported in the hour."""
    seconds = F.unix_seconds("ts")
    is_space, is_address = F.col("kind") == "space", F.col("kind") == "address"
    per_series_minute = (
        _on_day(deltas, day)
        .withColumn("minute", seconds - seconds % 60)
        .groupBy(*SERIES, "minute")
        .agg(
            F.max(F.when(is_address, F.col("stored_bytes")).otherwise(0)).alias("stored_bytes"),
            *[F.max(F.when(is_space, F.col(n)).otherwise(0)).alias(n) for n in _LINK_GAUGES],
        )
    )
    gauges = ("stored_bytes", *_LINK_GAUGES)
    peaks = (
        per_series_minute.groupBy("tenant", "space", "minute")
        .agg(*[F.sum(n).alias(n) for n in gauges])
        .withColumn("hour_s", F.col("minute") - F.col("minute") % 3600)
        .groupBy("tenant", "space", "hour_s")
        .agg(*[F.max(n).alias(n) for n in gauges])
    )
    addresses = (
        per_series_minute.where(is_address)
        .withColumn("hour_s", F.col("minute") - F.col("minute") % 3600)
        .groupBy("tenant", "space", "hour_s")
        .agg(F.countDistinct("address").alias("addresses"))
    )
    return peaks.join(addresses, on=["tenant", "space", "hour_s"], how="left").select(
        "tenant",
        "space",
        _hour(F.col("hour_s")).alias("hour"),
        *[F.col(n).cast("long").alias(n) for n in _LINK_GAUGES],
        F.coalesce(F.col("addresses"), F.lit(0)).cast("long").alias("addresses"),
        F.col("stored_bytes").cast("long").alias("stored_bytes"),
    )


def daily_tenant(
    address_daily: DataFrame,
    space_peaks: DataFrame,
    day: date,
    tenants: DataFrame | Iterable[str] | None = None,
) -> DataFrame:
    """Per tenant on `day`: what its quotas measure.

    messages = messages_in (published) + messages_out (delivered), bytes likewise; stored_bytes
    and connections: per hour the sum of the tenant's spaces' hourly peaks, then the day's
    maximum. Every tenant in `tenants` (slugs, or a DataFrame with a `tenant` column) gets a row,
    zeros when it had no traffic.
    """
    traffic = address_daily.groupBy("tenant").agg(*[F.sum(n).alias(n) for n in COUNTERS])
    peaks = (
        space_peaks.groupBy("tenant", "hour")
        .agg(F.sum("stored_bytes").alias("stored_bytes"), F.sum("connections").alias("conns"))
        .groupBy("tenant")
        .agg(F.max("stored_bytes").alias("stored_bytes"), F.max("conns").alias("connections"))
    )
    joined = traffic.join(peaks, on="tenant", how="full")
    if tenants is not None:
        if not isinstance(tenants, DataFrame):
            tenants = address_daily.sparkSession.createDataFrame(
                [(slug,) for slug in tenants], T.StructType([T.StructField("tenant", T.StringType())])
            )
        joined = tenants.select("tenant").distinct().join(joined, on="tenant", how="full")
    measures = COUNTERS + ("stored_bytes", "connections")
    zeroed = joined.select(
        "tenant", *[F.coalesce(F.col(n), F.lit(0)).cast("long").alias(n) for n in measures]
    )
    return zeroed.select(
        "tenant",
        F.lit(day).alias("day"),
        "messages_in",
        "messages_out",
        (F.col("messages_in") + F.col("messages_out")).alias("messages"),
        "bytes_in",
        "bytes_out",
        (F.col("bytes_in") + F.col("bytes_out")).alias("bytes"),
        "stored_bytes",
        "connections",
    )


_LINK_GAUGES = ("connections", "senders", "receivers")


def _on_day(deltas: DataFrame, day: date) -> DataFrame:
    start, end = day_start(day), day_start(day + timedelta(days=1))
    return deltas.where((F.col("ts") >= F.lit(start)) & (F.col("ts") < F.lit(end)))


def _address_rows(deltas: DataFrame, day: date) -> DataFrame:
    return _on_day(deltas, day).where(F.col("kind") == "address")


def _address_measures() -> list[Column]:
    sums = [F.sum(delta).alias(name) for name, delta in zip(COUNTERS, DELTAS, strict=True)]
    return sums + [F.max(n).alias(n) for n in ("stored_messages", "stored_bytes")]


def _address_names() -> list[str]:
    return [*COUNTERS, "stored_messages", "stored_bytes"]


def _hour(epoch_seconds: Column) -> Column:
    return F.timestamp_seconds(epoch_seconds - epoch_seconds % 3600)
