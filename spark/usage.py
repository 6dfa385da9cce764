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

Deltas are summed per hour without ordering the readings: within one epoch the deltas of a run
of readings add up to how far they raised the epoch's highest reading (each bills what it grew
beyond the highest before it), so an hour's sum is its highest reading minus the highest before
the hour. Only maxima and minima per (series, epoch, hour) are needed, which Spark computes by
hashing, and only those much fewer rows are sorted (docs/usage.md, "Figures"). Copies of a
reading change no maximum, so they need no removal.
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
    + [T.StructField("epoch", T.StringType()), T.StructField("since", T.TimestampType())]
)
ADDRESS_KEYS = ("tenant", "space", "address")


def day_start(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def read_samples(spark: SparkSession, base: str, day: date) -> DataFrame:
    """The readings that `day` needs: its own and the earlier ones its baselines come from.

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
    """The readings before the end of `day` (the next day's never count), gaps dropped (a gap is
    neither a reading nor a baseline), a null epoch taken as ""."""
    end = F.lit(day_start(day + timedelta(days=1)))
    return samples.where(F.col("messages_in").isNotNull() & (F.col("ts") < end)).select(
        *[F.coalesce(F.col("epoch"), F.lit("")).alias(n) if n == "epoch" else F.col(n)
          for n in COLUMNS])


def with_deltas(samples: DataFrame, day: date) -> DataFrame:
    """Per series, epoch and hour of `day` with readings: `<counter>_delta`, the sum of what
    each reading grew beyond the highest earlier reading of its epoch (by the rules above), and
    the highest stored gauges; clustered by (tenant, space), as every rollup is grouped.

    `samples`: select_day's readings. An hour's sum is its highest reading minus the highest
    before it (within the epoch); for an epoch's first hour, minus 0 (a new counter instance, or
    a first reading whose epoch began in the window) or minus the series' first reading (its
    start unknown: it bills nothing, what came after it does).
    """
    first_of = [F.min_by(n, "ts").alias(f"_first_{n}") for n in ("since", *COUNTERS)]
    hours = (
        _on_day(samples, day)
        .groupBy(*SERIES, "epoch", _hour(F.unix_seconds("ts")).alias("hour"))
        .agg(*[F.max(n).alias(f"_top_{n}") for n in COUNTERS], F.min("ts").alias("_ts"),
             *first_of, *[F.max(n).alias(n) for n in ("stored_messages", "stored_bytes")])
    )
    # The baseline as an epoch's hour before the day (hour null sorts first): the day's hours
    # of that epoch compare with its highest counters.
    baselines = _baselines(samples, day).select(
        *SERIES, "epoch", F.lit(None).cast("timestamp").alias("hour"),
        *[F.col(n).alias(f"_top_{n}") for n in COUNTERS], F.col("ts").alias("_ts"),
        *[F.lit(None).cast(t).alias(f"_first_{n}")
          for n, t in (("since", "timestamp"), *((c, "long") for c in COUNTERS))],
        *[F.lit(None).cast("long").alias(n) for n in ("stored_messages", "stored_bytes")])
    # Clustered by (tenant, space): the windows below and every rollup's grouping (all keyed by
    # tenant and space) need no further shuffle. Sorted once, by series first: both windows
    # read that order. The series' hash leads the sort, since Spark compares rows by an 8-byte
    # prefix of the first key, which for `source` ("broker:t...") is the same on most rows.
    rows = (
        hours.unionByName(baselines)
        .repartition("tenant", "space")
        .withColumn("_series", F.xxhash64(*SERIES))
        .sortWithinPartitions("_series", *SERIES, "epoch", "hour")
    )
    earlier = (Window.partitionBy("_series", *SERIES, "epoch").orderBy("hour")
               .rowsBetween(Window.unboundedPreceding, -1))
    rows = rows.select(
        "*", *[F.max(f"_top_{n}").over(earlier).alias(f"_before_{n}") for n in COUNTERS])
    # The series' first reading is the earliest of the first hours of its epochs, unless the
    # series has a baseline (then that was first).
    series = Window.partitionBy("_series", *SERIES)
    opens_epoch = F.col(f"_before_{COUNTERS[0]}").isNull()
    first_ts = F.min(F.when(opens_epoch & F.col("hour").isNotNull(), F.col("_ts"))).over(series)
    has_baseline = F.max(F.col("hour").isNull()).over(series)
    rows = rows.withColumn("_series_first", ~has_baseline & (F.col("_ts") == first_ts))
    known_start = (F.col("_first_since").isNotNull()
                   & (F.col("_first_since") >= F.lit(window_start(day))))
    zero = F.lit(0).cast("long")
    deltas = []
    for name, delta in zip(COUNTERS, DELTAS, strict=True):
        top, before = F.col(f"_top_{name}"), F.col(f"_before_{name}")
        # What the epoch's first hour starts from: the series' first reading when its start is
        # unknown (it bills nothing), else 0 (all of it is new).
        start = (F.when(F.col("_series_first") & ~known_start, F.col(f"_first_{name}"))
                 .otherwise(zero))
        # Lower than before within one epoch is not a reset: it bills nothing, and what comes
        # after it is compared with the highest, so nothing is billed twice.
        deltas.append(F.when(opens_epoch, top - start)
                      .otherwise(F.greatest(top, before) - before).alias(delta))
    return rows.where(F.col("hour").isNotNull()).select(
        *SERIES, "hour", *deltas, "stored_messages", "stored_bytes")


def _baselines(samples: DataFrame, day: date) -> DataFrame:
    """Per series, its last reading before `day`: its `ts` and epoch, with that epoch's highest
    counters before the day (what the day's readings of that epoch compare with)."""
    per_epoch = (
        samples.where(F.col("ts") < F.lit(day_start(day)))
        .groupBy(*SERIES, "epoch")
        .agg(F.max("ts").alias("ts"), *[F.max(n).alias(n) for n in COUNTERS])
    )
    # Few rows (one per series and epoch): a struct's maximum, compared field by field, is the
    # epoch of the last reading.
    last = F.max(F.struct("ts", "epoch", *COUNTERS)).alias("_last")
    return (per_epoch.groupBy(*SERIES).agg(last)
            .select(*SERIES, *[F.col(f"_last.{n}").alias(n) for n in ("ts", "epoch", *COUNTERS)]))


def daily_address(deltas: DataFrame, day: date) -> DataFrame:
    """Per (tenant, space, address) on `day`: messages and bytes in and out, peak stored.
    `deltas`: with_deltas' rows."""
    return daily_from_hourly(hourly_address(deltas), day)


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


def hourly_address(deltas: DataFrame) -> DataFrame:
    """The same as daily_address per hour (`hour`: the hour's start, a UTC timestamp); traffic
    of space rows shows under the address "". `deltas`: with_deltas' rows."""
    return (
        _address_rows(deltas)
        .groupBy(*ADDRESS_KEYS, "hour")
        .agg(*_address_measures())
        .select(*ADDRESS_KEYS, "hour", *_address_names())
    )


def hourly_peaks(samples: DataFrame, address_hourly: DataFrame, day: date) -> DataFrame:
    """Per (tenant, space, hour): peak connections, senders, receivers and stored bytes, and the
    number of distinct addresses that reported in the hour. `samples`: select_day's readings;
    `address_hourly`: hourly_address's rows of the same day."""
    seconds = F.unix_seconds("ts")
    is_space, is_address = F.col("kind") == "space", F.col("kind") == "address"
    gauges = ("stored_bytes", *_LINK_GAUGES)
    # A series rarely has two readings in one minute, so aggregating per series and minute
    # before a shuffle would hash every reading twice for nothing: the readings are clustered
    # by space first, and all three aggregations run where the rows are.
    readings = _on_day(samples, day).select(
        *SERIES,
        (seconds - seconds % 60).alias("minute"),
        F.when(is_address, F.col("stored_bytes")).otherwise(0).alias("stored_bytes"),
        *[F.when(is_space, F.col(n)).otherwise(0).alias(n) for n in _LINK_GAUGES],
    )
    peaks = (
        readings.repartition("tenant", "space")
        .groupBy(*SERIES, "minute")
        .agg(*[F.max(n).alias(n) for n in gauges])
        .groupBy("tenant", "space", "minute")
        .agg(*[F.sum(n).alias(n) for n in gauges])
        .groupBy("tenant", "space", _hour(F.col("minute")).alias("hour"))
        .agg(*[F.max(n).alias(n) for n in gauges])
    )
    # An address that reported in an hour has exactly one hourly_address row for it.
    addresses = (
        address_hourly
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


def _on_day(samples: DataFrame, day: date) -> DataFrame:
    start, end = day_start(day), day_start(day + timedelta(days=1))
    return samples.where((F.col("ts") >= F.lit(start)) & (F.col("ts") < F.lit(end)))


def _address_rows(deltas: DataFrame) -> DataFrame:
    """Address rows, and space rows of an hour in which the space's readings carried traffic
    (as the address "")."""
    moved = sum((F.col(d) for d in DELTAS), F.lit(0))
    return deltas.where(
        (F.col("kind") == "address") | ((F.col("kind") == "space") & (moved > 0)))


def _address_measures() -> list[Column]:
    sums = [F.sum(delta).alias(name) for name, delta in zip(COUNTERS, DELTAS, strict=True)]
    return sums + [F.max(n).alias(n) for n in ("stored_messages", "stored_bytes")]


def _address_names() -> list[str]:
    return [*COUNTERS, "stored_messages", "stored_bytes"]


def _hour(epoch_seconds: Column) -> Column:
    return F.timestamp_seconds(epoch_seconds - epoch_seconds % 3600)
