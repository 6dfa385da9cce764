"""The live quota evaluation of one tenant: today so far (workers/usage/live.py) against its
limits, throttling or releasing it at once through tenants.services.

Run by the task `maas.workers.evaluate_quota`, queued after every quota change and by an
operator's POST .../quota/evaluate/. It is an estimate with the job's rules; the usage job's
next run is authoritative (docs/quotas.md).
"""
import logging
import os
import time
from datetime import UTC, datetime, timedelta

from celery import current_app
from django.conf import settings
from django.db.models import Sum
from django.utils import timezone

from core.context import Context
from tenants import services as tenant_services
from tenants.limits import USAGE_LIMITS, breaches
from tenants.models import AddressUsageHourly, SpacePeakHourly, Tenant, TenantQuota, UsageJobRun

logger = logging.getLogger(__name__)
ACTOR = Context(actor="system:quota-live")
TASK = "maas.workers.evaluate_quota"  # workers/tasks.py, sent by name as dispatch does
# Samples read before the cut as baselines: a few sampling intervals, so that every series
# read regularly has its last reading before the cut among them.
LOOKBACK_INTERVALS = 5


def queue_evaluation(tenant_id: int) -> None:
    """Queues the evaluation in the default queue, where changes go: the usage queue may be
    busy with a Spark job for minutes."""
    current_app.send_task(TASK, (tenant_id,), queue=settings.CELERY_TASK_DEFAULT_QUEUE)


def _live():
    # Imported when evaluating: every process registers queue_evaluation at start-up (workers/
    # apps.py), and only workers need pyarrow for it.
    from workers.usage import live

    return live


def cut_of(day_start: datetime, now: datetime) -> datetime:
    """Where the stored rollups end: the start of the hour in which the latest successful job
    run of the day began, less two sampling intervals (a reading taken just before the hour
    may have been written after the run read the store); the day's start without one."""
    run = (UsageJobRun.objects.filter(day=day_start.date(), status=UsageJobRun.SUCCEEDED)
           .order_by("-started_at").values_list("started_at", flat=True).first())
    if run is None:
        return day_start
    margin = timedelta(seconds=2 * settings.MAAS_USAGE_SAMPLE_INTERVAL)
    return min(max(_hour(run - margin), day_start), _hour(now))


def _hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def stored_rollups(tenant: Tenant, day_start: datetime, cut: datetime):
    """live.Rollups of the tenant's hours in [day_start, cut), as the job stored them."""
    live = _live()
    hours = {"tenant": tenant, "hour__gte": day_start, "hour__lt": cut}
    traffic = AddressUsageHourly.objects.filter(**hours).aggregate(
        **{name: Sum(name) for name in live.COUNTERS})
    peaks = (SpacePeakHourly.objects.filter(**hours).values("hour")
             .annotate(**{f"sum_{name}": Sum(name) for name in live.PEAKS}))
    return live.Rollups(
        traffic={name: value or 0 for name, value in traffic.items()},
        peaks={p["hour"].astimezone(UTC): {n: p[f"sum_{n}"] or 0 for n in live.PEAKS}
               for p in peaks},
    )


def evaluate(tenant_id: int, now: datetime | None = None) -> dict:
    """Measures the tenant's day so far and throttles (limits breached) or releases it (none
    breached, throttled); returns what it found and did."""
    tenant = Tenant.objects.live().filter(pk=tenant_id).first()
    if tenant is None:
        logger.info("quota.live_dropped", extra={"tenant_id": tenant_id})
        return {"tenant_id": tenant_id, "action": "dropped"}
    live, started = _live(), time.monotonic()
    now = (now or timezone.now()).astimezone(UTC)
    start = live.day_start(now.date())
    cut = cut_of(start, now)
    if not os.path.isdir(settings.MAAS_USAGE_STORE):  # the sampler writes a local directory
        logger.warning("quota.live_no_store", extra={"store": settings.MAAS_USAGE_STORE})
    today = live.today_so_far(
        settings.MAAS_USAGE_STORE, tenant.slug, cut=cut, now=now,
        lookback=timedelta(seconds=LOOKBACK_INTERVALS * settings.MAAS_USAGE_SAMPLE_INTERVAL),
        rollups=stored_rollups(tenant, start, cut))
    quota, _ = TenantQuota.objects.get_or_create(tenant=tenant)
    found = breaches(today.measures, {limit: getattr(quota, limit) for limit in USAGE_LIMITS})
    if found:
        changed = tenant_services.throttle(ctx=ACTOR, tenant=tenant, limits=found)
        action = "throttled" if changed else "kept"
    elif quota.throttled:
        changed = tenant_services.unthrottle(
            ctx=ACTOR, tenant=tenant, reason="usage back under quota (live evaluation)")
        action = "released" if changed else "kept"
    else:
        action = "none"
    result = {"tenant": tenant.slug, "action": action, "measures": today.measures,
              "breached": found, "cut": cut.isoformat(), "files": today.files,
              "readings": today.readings, "seconds": round(time.monotonic() - started, 3)}
    logger.info("quota.live_evaluated", extra=result)
    return result
