"""The usage page's charts for one tenant: messages and bytes per day over 30 days, the hourly
figures of one day, and quota usage against its limits, from the usage job's tables."""
import datetime

from django.db.models import F, Sum
from django.db.models.functions import TruncHour
from django.utils.safestring import mark_safe

from tenants.models import AddressUsageHourly, QuotaEvaluation, SpacePeakHourly, TenantUsageDaily

from .charts import bar_chart, limit_bars, number, size

DAYS = 30
LIMIT_NAMES = {"messages_per_day": ("Messages per day", number),
               "bytes_per_day": ("Bytes per day", size),
               "stored_bytes": ("Stored bytes", size),
               "peak_connections": ("Peak connections", number)}


def daily(tenant, end: datetime.date) -> dict:
    """The 30 days up to `end`: the table rows and two bar charts; a day without a row is a
    gap in the chart (the job has not measured it), not a zero."""
    start = end - datetime.timedelta(days=DAYS - 1)
    rows = {d.day: d for d in TenantUsageDaily.objects.filter(
        tenant=tenant, day__gte=start, day__lte=end)}
    days = [start + datetime.timedelta(days=i) for i in range(DAYS)]
    labels = [d.strftime("%d %b") for d in days]

    def series(field):
        return [getattr(rows[d], field) if d in rows else None for d in days]

    return {
        "rows": [rows[d] for d in reversed(days) if d in rows],
        "messages": mark_safe(bar_chart(  # noqa: S308 - charts.py escapes every text
            title=f"Messages per day, {labels[0]} to {labels[-1]}", labels=labels,
            values=series("messages"), unit="messages", label_every=5,
            chart_id="messages-per-day")),
        "bytes": mark_safe(bar_chart(  # noqa: S308
            title=f"Bytes per day, {labels[0]} to {labels[-1]}", labels=labels,
            values=series("bytes"), fmt=size, unit="bytes", label_every=5,
            chart_id="bytes-per-day")),
    }


def latest_hourly_day(tenant) -> datetime.date | None:
    hour = AddressUsageHourly.objects.filter(tenant=tenant).order_by("-hour").values_list(
        "hour", flat=True).first()
    return hour.astimezone(datetime.UTC).date() if hour else None


def hourly(tenant, day: datetime.date) -> dict:
    """Messages and peak connections in each hour (UTC) of `day`, summed over the spaces."""
    start = datetime.datetime.combine(day, datetime.time(), tzinfo=datetime.UTC)
    end = start + datetime.timedelta(days=1)
    messages = dict(AddressUsageHourly.objects.filter(
        tenant=tenant, hour__gte=start, hour__lt=end).annotate(h=TruncHour("hour")).values(
        "h").annotate(n=Sum(F("messages_in") + F("messages_out"))).values_list("h", "n"))
    connections = dict(SpacePeakHourly.objects.filter(
        tenant=tenant, hour__gte=start, hour__lt=end).annotate(h=TruncHour("hour")).values(
        "h").annotate(n=Sum("connections")).values_list("h", "n"))
    hours = [start + datetime.timedelta(hours=i) for i in range(24)]
    labels = [f"{h.hour:02d}" for h in hours]
    return {
        "day": day,
        "messages": mark_safe(bar_chart(  # noqa: S308
            title=f"Messages per hour on {day.isoformat()} (UTC)", labels=labels,
            values=[messages.get(h) for h in hours], unit="messages", label_every=2,
            chart_id="messages-per-hour")),
        "connections": mark_safe(bar_chart(  # noqa: S308
            title=f"Peak connections per hour on {day.isoformat()} (UTC)", labels=labels,
            values=[connections.get(h) for h in hours], unit="connections", label_every=2,
            chart_id="connections-per-hour")),
    }


def limits(tenant) -> tuple[list, str]:
    """The latest quota evaluation's rows, and its chart."""
    latest = QuotaEvaluation.objects.filter(tenant=tenant).order_by("-day").values_list(
        "day", flat=True).first()
    rows = list(QuotaEvaluation.objects.filter(tenant=tenant, day=latest).order_by("limit")
                ) if latest else []
    chart = limit_bars(
        title=f"Quota usage against limits on {latest.isoformat()}" if latest else "Quotas",
        rows=[(LIMIT_NAMES.get(q.limit, (q.limit, number))[0], q.used, q.limit_value,
               LIMIT_NAMES.get(q.limit, (q.limit, number))[1]) for q in rows],
        chart_id="quota-usage")
    return rows, mark_safe(chart)  # noqa: S308
