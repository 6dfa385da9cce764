"""A month of usage for a tenant, written by the usage job's own writer (workers.usage.job.store)
as the nightly job would: daily totals with a weekly shape, the hours of the last day, and a
quota evaluation with one limit exceeded."""
import datetime
import math

from django.utils import timezone

from workers.usage.job import store


def daily_messages(i: int) -> int:
    """Day i of 30: weekdays busy, weekends quiet, growing through the month."""
    weekday = (i % 7) < 5
    return int((9000 if weekday else 2500) * (1 + i / 30))


def write_month(tenant, days: int = 30, skip: int | None = 12) -> datetime.date:
    """Writes `days` days up to today, leaving day `skip` unmeasured; returns today."""
    today = timezone.now().date()
    for i in range(days):
        day = today - datetime.timedelta(days=days - 1 - i)
        if i == skip:
            continue
        start = datetime.datetime.combine(day, datetime.time(), tzinfo=datetime.UTC)
        tables = {"tenant_daily": [{
            "tenant": tenant.slug, "day": day, "messages": daily_messages(i),
            "bytes": daily_messages(i) * 512, "stored_bytes": 40_000 + 1000 * i,
            "connections": 10 + i % 7}]}
        if i == days - 1:  # the hours of today, busiest in the afternoon
            tables["address_hourly"] = [{
                "tenant": tenant.slug, "space": "shop", "address": "orders",
                "hour": start + datetime.timedelta(hours=h),
                "messages_in": int(300 + 250 * math.sin(math.pi * h / 24) ** 2 * 4),
                "messages_out": int(280 + 250 * math.sin(math.pi * h / 24) ** 2 * 4),
                "bytes_in": 1000 * h, "bytes_out": 1000 * h} for h in range(24)]
            tables["space_peaks"] = [{
                "tenant": tenant.slug, "space": "shop", "hour": start + datetime.timedelta(hours=h),
                "connections": 3 + (h * 7) % 11, "senders": 2, "receivers": 2, "addresses": 4,
                "stored_bytes": 100} for h in range(24)]
            tables["quota"] = [
                {"tenant": tenant.slug, "day": day, "limit": "messages_per_day",
                 "used": daily_messages(i), "limit_value": 20000,
                 "share": daily_messages(i) / 20000, "breached": False},
                {"tenant": tenant.slug, "day": day, "limit": "peak_connections",
                 "used": 16, "limit_value": 12, "share": 16 / 12, "breached": True},
                {"tenant": tenant.slug, "day": day, "limit": "bytes_per_day",
                 "used": daily_messages(i) * 512, "limit_value": None, "share": None,
                 "breached": False}]
        store(day, tables)
    return today
