"""Quota evaluation of one day: per tenant and limit, the use, the share, breach and forecast.

Limits (a null limit means none) and the daily tenant measure each is checked against:
messages_per_day ~ messages, bytes_per_day ~ bytes, stored_bytes ~ stored_bytes (peak),
peak_connections ~ connections (peak). The forecast is the first day on which the least-squares
line through the last 7 days (the day itself and the 6 before, as far as known) reaches the
limit: `day` itself when already breached, null when there is no limit, fewer than two known
days, a line that does not rise, or a day more than FORECAST_HORIZON_DAYS ahead.
"""
from datetime import date, timedelta

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

LIMITS = {
    "messages_per_day": "messages",
    "bytes_per_day": "bytes",
    "stored_bytes": "stored_bytes",
    "peak_connections": "connections",
}
TREND_DAYS = 7
FORECAST_HORIZON_DAYS = 365


def evaluate(
    daily_tenant: DataFrame, history: DataFrame, quotas: DataFrame, day: date
) -> DataFrame:
    """Rows (tenant, day, limit, used, limit_value, share, breached, forecast_day) for every
    tenant of daily_tenant or quotas and every limit; `history` holds earlier daily_tenant rows
    (tenant, day, messages, bytes, stored_bytes, connections), only its last 6 days are used."""
    measures = list(dict.fromkeys(LIMITS.values()))
    today = daily_tenant.select("tenant", F.lit(day).alias("day"), *measures)
    earlier = (
        history.where(
            (F.col("day") >= F.lit(day - timedelta(days=TREND_DAYS - 1)))
            & (F.col("day") < F.lit(day))
        )
        .groupBy("tenant", F.col("day").cast("date").alias("day"))
        .agg(*[F.max(n).alias(n) for n in measures])
    )
    points = _by_limit(today.unionByName(earlier), ["tenant", "day"], "used", LIMITS).withColumn(
        "x", F.datediff(F.col("day"), F.lit(day)).cast("double")
    )
    y = F.col("used").cast("double")
    trend = points.groupBy("tenant", "limit").agg(
        F.count(F.lit(1)).alias("n"),
        F.sum("x").alias("sx"),
        F.sum(y).alias("sy"),
        F.sum(F.col("x") * y).alias("sxy"),
        F.sum(F.col("x") * F.col("x")).alias("sxx"),
    )
    used = _by_limit(today, ["tenant"], "used", LIMITS)
    limits = _by_limit(quotas, ["tenant"], "limit_value", {limit: limit for limit in LIMITS})
    joined = used.join(limits, on=["tenant", "limit"], how="full").join(
        trend, on=["tenant", "limit"], how="left"
    )
    used_col, limit_col = F.coalesce(F.col("used"), F.lit(0)).cast("long"), F.col("limit_value")
    breached = limit_col.isNotNull() & (used_col > limit_col)
    return joined.select(
        "tenant",
        F.lit(day).alias("day"),
        "limit",
        used_col.alias("used"),
        limit_col.alias("limit_value"),
        F.when(limit_col > 0, used_col / limit_col).alias("share"),
        breached.alias("breached"),
        F.when(breached, F.lit(day))
        .when(limit_col.isNotNull(), _forecast(limit_col, day))
        .alias("forecast_day"),
    )


def _forecast(limit: Column, day: date) -> Column:
    n, sx, sy, sxy, sxx = (F.col(c) for c in ("n", "sx", "sy", "sxy", "sxx"))
    denominator = n * sxx - sx * sx
    slope = F.when((n >= 2) & (denominator != 0), (n * sxy - sx * sy) / denominator)
    level_today = (sy - slope * sx) / n  # the line's value at x = 0, i.e. on `day`
    days_ahead = (limit.cast("double") - level_today) / slope
    return F.when(
        (slope > 0) & (days_ahead <= FORECAST_HORIZON_DAYS),
        F.date_add(F.lit(day), F.greatest(F.lit(1), F.ceil(days_ahead).cast("int"))),
    )


def _by_limit(df: DataFrame, keys: list[str], value: str, columns: dict[str, str]) -> DataFrame:
    """One row per limit, (keys..., limit, value), from the column `columns[limit]` of df."""
    pairs = [
        F.struct(F.lit(limit).alias("limit"), F.col(column).cast("long").alias(value))
        for limit, column in columns.items()
    ]
    return df.select(*keys, F.explode(F.array(*pairs)).alias("_p")).select(
        *keys, "_p.limit", f"_p.{value}"
    )
