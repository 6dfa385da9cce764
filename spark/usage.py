"""Usage rollups of the sample store: counter deltas, per address, per space and per tenant.

Every transform is pure (DataFrame in, DataFrame out); only `read_samples` touches storage.
Times are UTC instants: days and hours are cut on epoch seconds, whatever the session's zone.
Definitions (docs/usage.md):
- a series is one counter source for one address or space: (source, tenant, space, kind,
  address); a gap (the source could not be read: counters null) is no reading at all;
- a reading's `epoch` names the counter instance: within one epoch a counter only grows, so
  delta = cur - prev, and a lower reading bills 0 (never a reset); a new epoch started from zero,
  so its first reading bills cur; a series' first reading bills cur only when its epoch began
  (`since`) inside the window read, else 0, since its start is unknown;
- gauges of several readings in one minute count once per series (their maximum) and are
  summed over series (addresses, sources) before taking peaks;
- space rows carry traffic where it is measured per space only (a brokered space's connection
  octets); the address tables show it under the address "".
"""
from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession, Window, WindowSpec
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
    + [T.StructField("epoch", T.StringType()), T.StructField("since", T.TimestampType())]
)
ADDRESS_KEYS = ("tenant", "space", "address")


def day_start(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def read_samples(spark: SparkSession, base: str, day: date) -> DataFrame:
    """The readings that `day` needs, deduplicated: its own and each series' baseline,
    clustered by (tenant, space) and sorted by series and time, as with_deltas needs them.

    Reads the files written on day-1, day and day+1 (late readings land a day later); a series
    whose last earlier reading is older than that has no baseline on `day`.
    """
    paths = [f"{base.rstrip('/')}/date={(day + timedelta(days=n)).isoformat()}"
             for n in (-1, 0, 1)]
    # A day without samples (the next one, not written yet; the store's first day) is an
    # expected case: only the directories that exist are read, so that Spark logs no
    # FileNotFoundException for the others.
    paths = existing_paths(spark, paths)
    try:
        raw = spark.read.schema(SPARK_SCHEMA).parquet(*paths) if paths else None
    except AnalysisException as error:
        if error.getCondition() != "PATH_NOT_FOUND":
            raise
        raw = None
    if raw is None:
        raw = spark.createDataFrame([], SPARK_SCHEMA)
    return select_day(raw, day)


def existing_paths(spark: SparkSession, paths: list[str]) -> list[str]:
    """The `paths` that exist, asked of the store's own file system (local, HDFS, S3) through
    Hadoop; all of them where the session has no JVM at hand (Spark Connect)."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return paths
    conf = spark._jsc.hadoopConfiguration()
    found = []
    for path in paths:
        hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
        if hadoop_path.getFileSystem(conf).exists(hadoop_path):
            found.append(path)
    return found


def window_start(day: date) -> datetime:
    """The earliest `ts` whose file the job of `day` reads: a counter that began counting at or
    after it has all its earlier readings in the window, so the job knows what it billed."""
    return day_start(day - timedelta(days=1))


def select_day(samples: DataFrame, day: date) -> DataFrame:
    """Keeps the readings of `day` and the last reading before it per series, once each; gaps
    are dropped (a gap is neither a reading nor a baseline)."""
    start, end = F.lit(day_start(day)), F.lit(day_start(day + timedelta(days=1)))
    samples = samples.where(F.col("messages_in").isNotNull()).select(
        *[F.coalesce(F.col("epoch"), F.lit("")).alias(n) if n == "epoch" else F.col(n)
          for n in COLUMNS])
    on_day = samples.where((F.col("ts") >= start) & (F.col("ts") < end))
    # Of the earlier readings only each series' last one matters, with its epoch's highest
    # counters (what with_deltas compares against): reducing them before the shuffle keeps the
    # previous day's files out of it. A struct compares field by field, so its maximum is the
    # last reading by (ts, sample_id).
    rest = ["ts", "sample_id", *[n for n in COLUMNS if n not in (*SERIES, "ts", "sample_id")]]
    last = [n for n in rest if n not in COUNTERS]
    per_epoch = (
        samples.where(F.col("ts") < start)
        .groupBy(*SERIES, "epoch")
        .agg(F.max(F.struct(*[n for n in last if n != "epoch"])).alias("_last"),
             *[F.max(n).alias(n) for n in COUNTERS])
        .select(*SERIES, F.struct(*[F.col(f"_last.{n}").alias(n) if n != "epoch" else
                                    F.col("epoch") for n in last], *COUNTERS).alias("_row"))
    )
    baselines = (
        per_epoch.groupBy(*SERIES)
        .agg(F.max("_row").alias("_row"))
        .select(*SERIES, *[F.col(f"_row.{n}").alias(n) for n in rest])
    )
    # Clustering by (tenant, space) satisfies the series windows here and in with_deltas and
    # every rollup's grouping (all keyed by tenant and space), so no further shuffle is needed.
    readings = on_day.unionByName(baselines).repartition("tenant", "space")
    # Copies of a reading tie on (series, ts, sample_id), so they sort next to each other.
    previous_id = F.lag("sample_id").over(_series_order())
    return (
        readings.withColumn("_previous_id", previous_id)
        .where(F.col("_previous_id").isNull() | (F.col("_previous_id") != F.col("sample_id")))
        .select(*COLUMNS)
    )


def with_deltas(samples: DataFrame, day: date) -> DataFrame:
    """Adds `<counter>_delta` per reading: what the counter grew beyond the highest earlier
    reading of its epoch, by the rules above (`day`: the day whose window was read)."""
    earlier_in_epoch = (Window.partitionBy(*SERIES, "epoch").orderBy("ts", "sample_id")
                        .rowsBetween(Window.unboundedPreceding, -1))
    previous = samples.select(
        *COLUMNS,
        F.lag("epoch").over(_series_order()).alias("_previous_epoch"),
        *[F.max(name).over(earlier_in_epoch).alias(f"_highest_{name}") for name in COUNTERS],
    )
    first = F.col("_previous_epoch").isNull()
    known_start = F.col("since").isNotNull() & (F.col("since") >= F.lit(window_start(day)))
    zero = F.lit(0).cast("long")
    deltas = []
    for name, delta in zip(COUNTERS, DELTAS, strict=True):
        cur, highest = F.col(name), F.col(f"_highest_{name}")
        deltas.append(
            F.when(first, F.when(known_start, cur).otherwise(zero))
            .when(highest.isNull(), cur)  # a new counter instance: all of it is new
            # Lower than before within one epoch is not a reset: it bills nothing, and the
            # next reading is compared with the highest, so nothing is billed twice.
            .otherwise(F.greatest(cur - highest, zero))
            .alias(delta)
        )
    return previous.select(*COLUMNS, *deltas)


def rollup_input(deltas: DataFrame, day: date) -> DataFrame:
    """The readings of `day` with only the columns the rollups read: what a job caches."""
    return _on_day(deltas, day).select(*SERIES, "ts", *DELTAS, *GAUGES)


def daily_address(deltas: DataFrame, day: date) -> DataFrame:
    """Per (tenant, space, address) on `day`: messages and bytes in and out, peak stored."""
    return daily_from_hourly(hourly_address(deltas, day), day)


def daily_from_hourly(address_hourly: DataFrame, day: date) -> DataFrame:
    """daily_address from hourly_address's rows: sums of the hours' sums, maxima of maxima."""
    return (
        address_hourly.groupBy(*ADDRESS_KEYS)
        .agg(
            *[F.sum(n).alias(n) for n in COUNTERS],
            *[F.max(n).alias(n) for n in ("stored_messages", "stored_bytes")],
        )
        .select(*ADDRESS_KEYS, F.lit(day).alias("day"), *_address_names())
    )


def hourly_address(deltas: DataFrame, day: date) -> DataFrame:
    """The same as daily_address per hour (`hour`: the hour's start, a UTC timestamp); traffic
    of space rows shows under the address ""."""
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
    gauges = ("stored_bytes", *_LINK_GAUGES)
    peaks = (
        _on_day(deltas, day)
        .withColumn("minute", seconds - seconds % 60)
        .groupBy(*SERIES, "minute")
        .agg(
            F.max(F.when(is_address, F.col("stored_bytes")).otherwise(0)).alias("stored_bytes"),
            *[F.max(F.when(is_space, F.col(n)).otherwise(0)).alias(n) for n in _LINK_GAUGES],
        )
        .groupBy("tenant", "space", "minute")
        .agg(*[F.sum(n).alias(n) for n in gauges])
        .groupBy("tenant", "space", _hour(F.col("minute")).alias("hour"))
        .agg(*[F.max(n).alias(n) for n in gauges])
    )
    # An address that reported in an hour has exactly one hourly_address row for it; a job
    # that caches hourly_address(deltas, day) has Spark read this identical plan from the cache.
    addresses = (
        hourly_address(deltas, day)
        .where(F.col("address") != "")
        .groupBy("tenant", "space", "hour")
        .agg(F.count(F.lit(1)).alias("addresses"))
    )
    return peaks.join(addresses, on=["tenant", "space", "hour"], how="left").select(
        "tenant",
        "space",
        "hour",
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


def _series_order() -> WindowSpec:
    return Window.partitionBy(*SERIES).orderBy("ts", "sample_id")


def _on_day(deltas: DataFrame, day: date) -> DataFrame:
    start, end = day_start(day), day_start(day + timedelta(days=1))
    return deltas.where((F.col("ts") >= F.lit(start)) & (F.col("ts") < F.lit(end)))


def _address_rows(deltas: DataFrame, day: date) -> DataFrame:
    """Address readings, and space readings that carry traffic (as the address "")."""
    moved = sum((F.col(d) for d in DELTAS), F.lit(0))
    return _on_day(deltas, day).where(
        (F.col("kind") == "address") | ((F.col("kind") == "space") & (moved > 0)))


def _address_measures() -> list[Column]:
    sums = [F.sum(delta).alias(name) for name, delta in zip(COUNTERS, DELTAS, strict=True)]
    return sums + [F.max(n).alias(n) for n in ("stored_messages", "stored_bytes")]


def _address_names() -> list[str]:
    return [*COUNTERS, "stored_messages", "stored_bytes"]


def _hour(epoch_seconds: Column) -> Column:
    return F.timestamp_seconds(epoch_seconds - epoch_seconds % 3600)
