"""Quota evaluation: used, share, breach and the forecast day from the 7-day linear trend."""
from datetime import date, timedelta

import pytest

from spark.jobs.nightly import HISTORY_SCHEMA, QUOTAS_SCHEMA
from spark.quota import evaluate

from .rows import collect

pytestmark = pytest.mark.slow  # a Spark JVM starts (seconds)

DAY = date(2026, 11, 20)
MEASURES = ("messages", "bytes", "stored_bytes", "connections")


def today(tenant: str, messages: int, connections: int = 0) -> dict:
    return {"tenant": tenant, "day": DAY, "messages_in": messages, "messages_out": 0,
            "messages": messages, "bytes_in": 0, "bytes_out": 0, "bytes": 0,
            "stored_bytes": 0, "connections": connections}


def past(tenant: str, days_ago: int, messages: int, connections: int = 0) -> tuple:
    return (tenant, DAY - timedelta(days=days_ago), messages, 0, 0, connections)


def quota(tenant: str, messages_per_day=None, peak_connections=None) -> tuple:
    return (tenant, messages_per_day, None, None, peak_connections)


@pytest.fixture(scope="module")
def evaluated(spark):
    daily = spark.createDataFrame([
        today("under", 400),
        today("breached", 1500),
        today("rising", 700, connections=9),
        today("falling", 400),
        today("unlimited", 10**9),
        today("newcomer", 50),
    ])
    history = spark.createDataFrame(
        [past("rising", n, 700 - 100 * n, connections=9) for n in range(1, 7)]
        + [past("rising", 9, 10**6)]  # older than the trend window: ignored
        + [past("falling", n, 400 + 50 * n) for n in range(1, 7)]
        + [past("under", n, 400) for n in range(1, 4)]
        + [past("breached", 1, 900)],
        HISTORY_SCHEMA,
    )
    quotas = spark.createDataFrame([
        quota("under", messages_per_day=800),
        quota("breached", messages_per_day=1000),
        quota("rising", messages_per_day=1000, peak_connections=10),
        quota("falling", messages_per_day=500),
        quota("newcomer", messages_per_day=100),
        quota("gone", messages_per_day=100),
    ], QUOTAS_SCHEMA)
    rows = collect(evaluate(daily, history, quotas, DAY))
    return {(r["tenant"], r["limit"]): r for r in rows}


def fields(row: dict) -> tuple:
    return (row["used"], row["limit_value"], row["share"], row["breached"], row["forecast_day"])


def test_a_use_under_a_flat_limit_has_a_share_and_no_forecast(evaluated):
    assert fields(evaluated[("under", "messages_per_day")]) == (400, 800, 0.5, False, None)


def test_a_breached_limit_is_forecast_for_the_day_itself(evaluated):
    assert fields(evaluated[("breached", "messages_per_day")]) == (1500, 1000, 1.5, True, DAY)


def test_a_rising_trend_forecasts_the_first_day_it_reaches_the_limit(evaluated):
    # 100, 200, ... 700 over the last 7 days: 1000 is reached three days later.
    assert fields(evaluated[("rising", "messages_per_day")]) == (
        700, 1000, 0.7, False, DAY + timedelta(days=3))


def test_a_flat_gauge_below_its_limit_has_no_forecast(evaluated):
    assert fields(evaluated[("rising", "peak_connections")]) == (9, 10, 0.9, False, None)


def test_a_falling_trend_has_no_forecast(evaluated):
    assert fields(evaluated[("falling", "messages_per_day")]) == (400, 500, 0.8, False, None)


def test_a_single_day_gives_no_trend(evaluated):
    assert fields(evaluated[("newcomer", "messages_per_day")]) == (50, 100, 0.5, False, None)


def test_no_limit_is_never_breached(evaluated):
    assert fields(evaluated[("unlimited", "messages_per_day")]) == (10**9, None, None, False, None)
    assert fields(evaluated[("breached", "bytes_per_day")]) == (0, None, None, False, None)


def test_every_tenant_gets_every_limit_once(evaluated):
    tenants = {"under", "breached", "rising", "falling", "unlimited", "newcomer", "gone"}
    limits = {"messages_per_day", "bytes_per_day", "stored_bytes", "peak_connections"}
    assert set(evaluated) == {(t, limit) for t in tenants for limit in limits}
    assert fields(evaluated[("gone", "messages_per_day")]) == (0, 100, 0.0, False, None)
