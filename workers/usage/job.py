"""Runs the Spark usage job for one day, stores its results idempotently, enforces quotas.

Re-running a day replaces that day's rows (delete + insert in one transaction), so a rerun
gives the same rows, never doubled ones. Each run is recorded as a UsageJobRun for operators.
"""
import datetime
import logging
import time
import traceback

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from core.context import Context
from tenants import services as tenant_services
from tenants.models import (
    AddressUsageDaily,
    AddressUsageHourly,
    QuotaEvaluation,
    SpacePeakHourly,
    Tenant,
    TenantQuota,
    TenantUsageDaily,
    UsageJobRun,
)

logger = logging.getLogger(__name__)
ACTOR = Context(actor="system:usage-job")
LIMITS = ("messages_per_day", "bytes_per_day", "stored_bytes", "peak_connections")
HISTORY_DAYS = 7


def _inputs(day: datetime.date):
    tenants = list(Tenant.objects.values_list("slug", flat=True))
    quotas = [
        {"tenant": q["tenant__slug"], **{k: q[k] for k in LIMITS}}
        for q in TenantQuota.objects.values("tenant__slug", *LIMITS)
    ]
    history = [
        {"tenant": h["tenant__slug"], "day": h["day"], "messages": h["messages"],
         "bytes": h["bytes"], "stored_bytes": h["stored_bytes"],
         "connections": h["connections"]}
        for h in TenantUsageDaily.objects.filter(
            day__gte=day - datetime.timedelta(days=HISTORY_DAYS), day__lt=day
        ).values("tenant__slug", "day", "messages", "bytes", "stored_bytes", "connections")
    ]
    return tenants, quotas, history


def store(day: datetime.date, tables: dict[str, list[dict]]) -> dict[str, int]:
    """Replaces the day's rows of every result table; returns the row counts."""
    tenant_ids = dict(Tenant.objects.values_list("slug", "id"))
    start = datetime.datetime.combine(day, datetime.time(), tzinfo=datetime.UTC)
    end = start + datetime.timedelta(days=1)
    counts = {}
    with transaction.atomic():
        for name, (model, day_filter) in _TABLES.items():
            model.objects.filter(**day_filter(day, start, end)).delete()
            objects = [model(tenant_id=tenant_ids[row["tenant"]], **_fields(model, row))
                       for row in tables.get(name, []) if row["tenant"] in tenant_ids]
            model.objects.bulk_create(objects, batch_size=5000)
            counts[name] = len(objects)
    return counts


def _fields(model, row: dict) -> dict:
    names = {f.name for f in model._meta.concrete_fields} - {"id", "tenant"}
    return {k: v for k, v in row.items() if k in names}


_TABLES = {
    "address_daily": (AddressUsageDaily, lambda d, s, e: {"day": d}),
    "address_hourly": (AddressUsageHourly, lambda d, s, e: {"hour__gte": s, "hour__lt": e}),
    "space_peaks": (SpacePeakHourly, lambda d, s, e: {"hour__gte": s, "hour__lt": e}),
    "tenant_daily": (TenantUsageDaily, lambda d, s, e: {"day": d}),
    "quota": (QuotaEvaluation, lambda d, s, e: {"day": d}),
}


def enforce(day: datetime.date, measured_before=None) -> dict[str, int]:
    """Throttles tenants with a breached limit on `day`, lifts it from those without one;
    `measured_before`: when the run read its figures, so that it keeps a throttle the live
    evaluation (docs/quotas.md) decided later, on newer figures."""
    breached: dict[int, list[dict]] = {}
    for q in QuotaEvaluation.objects.filter(day=day, breached=True).order_by("limit"):
        breached.setdefault(q.tenant_id, []).append(
            {"limit": q.limit, "used": q.used, "limit_value": q.limit_value})
    changed = {"throttled": 0, "unthrottled": 0}
    for tenant in Tenant.objects.live().filter(pk__in=breached):
        changed["throttled"] += tenant_services.throttle(ctx=ACTOR, tenant=tenant,
                                                         limits=breached[tenant.pk])
    for quota in (TenantQuota.objects.filter(throttled=True, tenant__deleted_at__isnull=True)
                  .exclude(tenant_id__in=breached)):
        changed["unthrottled"] += tenant_services.unthrottle(
            ctx=ACTOR, tenant=quota.tenant, reason="usage back under quota",
            measured_before=measured_before)
    return changed


# One usage job at a time on the whole platform: a Celery task is delivered again once it has
# run longer than Redis' visibility timeout (5 min; the job took 9 min at 100k addresses), and a
# second Spark job beside the first doubled its CPU and its 1.5 GiB JVM.
_ONE_JOB_LOCK = int.from_bytes(b"maas:usj", "big", signed=True)


def run_day(day: datetime.date, spark=None) -> UsageJobRun | None:
    """Runs the job for `day`; None, doing nothing, while another usage job runs anywhere."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [_ONE_JOB_LOCK])
        if not cursor.fetchone()[0]:
            logger.warning("usage.job_skipped", extra={
                "day": day.isoformat(), "reason": "another usage job is running"})
            return None
    try:
        return _run_day(day, spark)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [_ONE_JOB_LOCK])


def _run_day(day: datetime.date, spark=None) -> UsageJobRun:
    from spark.jobs import nightly
    from spark.session import get_session

    run = UsageJobRun.objects.create(day=day)
    started = time.monotonic()
    try:
        tenants, quotas, history = _inputs(day)
        tables = nightly.run(spark or get_session("maas-usage"), settings.MAAS_USAGE_STORE,
                             day, tenants, quotas, history)
        run.rows = store(day, tables)
        run.rows.update(enforce(day, measured_before=run.started_at))
        run.status = UsageJobRun.SUCCEEDED
    except Exception:
        run.status = UsageJobRun.FAILED
        run.error = traceback.format_exc()[-5000:]
        logger.exception("usage.job_failed", extra={"day": day.isoformat()})
        raise
    finally:
        run.finished_at = timezone.now()
        run.seconds = time.monotonic() - started
        run.save()
    logger.info("usage.job_done", extra={"day": day.isoformat(), "rows": run.rows})
    return run
