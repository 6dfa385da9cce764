"""Celery tasks: reconcile a space with its agents, relay the outbox, resync everything.

Tasks take ids, never model objects; a missing space is logged and dropped; only transient
errors of a target (broker unreachable) are retried, with backoff.
"""
import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db.models import F
from django.utils import timezone

from config_service.models import AddressSpace, Outbox

from .agents import base
from .dispatch import notify_space

logger = logging.getLogger(__name__)


@shared_task(name="maas.workers.reconcile_space", bind=True, max_retries=None,
             acks_late=True)
def reconcile_space(self, space_uid: str) -> None:
    space = AddressSpace.objects.filter(uid=space_uid).only("type").first()
    kinds = base.installed_kinds(space.type) if space else list(base.installed_agents())
    if space and space.type == "standard" and settings.MAAS_INFRA_BACKEND == "kubernetes":
        kinds = [k for k in kinds if k == "infra"]  # storage and router: the space's agent pod
    try:
        for kind in kinds:
            base.run(space_uid, kind)
    except base.TransientError as exc:
        delay = min(2 ** self.request.retries, 60)
        logger.warning("agent.retry", extra={"space": space_uid, "error": str(exc),
                                             "countdown": delay})
        raise self.retry(exc=exc, countdown=delay) from exc


@shared_task(name="maas.workers.relay_outbox")
def relay_outbox() -> int:
    """Re-sends events whose delivery was not acknowledged in time (worker or Redis down)."""
    cutoff = timezone.now() - timedelta(seconds=settings.MAAS_RELAY_AFTER_SECONDS)
    stale = Outbox.objects.filter(acked_at__isnull=True, created_at__lt=cutoff).exclude(
        last_sent_at__gte=cutoff
    )
    spaces = list(stale.values_list("stream_uid", flat=True).distinct()[:500])
    for space_uid in spaces:
        notify_space(space_uid)
    if spaces:
        Outbox.objects.filter(stream_uid__in=spaces, acked_at__isnull=True).update(
            attempts=F("attempts") + 1, last_sent_at=timezone.now()
        )
        logger.info("outbox.relayed", extra={"spaces": len(spaces)})
    return len(spaces)


@shared_task(name="maas.workers.resync_all")
def resync_all() -> int:
    """Level-triggered repair: every space is reconciled again (drift, restarted brokers)."""
    if settings.MAAS_AGENT_MODE == "process":
        return 0  # each run_agent process resyncs its own space on a timer
    uids = list(AddressSpace.objects.values_list("uid", flat=True))
    for uid in uids:
        reconcile_space.delay(str(uid))
    return len(uids)


@shared_task(name="maas.workers.sample_usage")
def sample_usage() -> int:
    from .usage.sampler import sample

    return sample()


@shared_task(name="maas.workers.run_usage_job", bind=True, max_retries=3)
def run_usage_job(self, day: str | None = None) -> str:
    """The rollup of `day` ("YYYY-MM-DD", "today", or yesterday by default); retried with
    backoff; every run is recorded as a UsageJobRun."""
    import datetime

    from .usage.job import run_day

    today = datetime.datetime.now(datetime.UTC).date()
    if day == "today":
        when = today
    else:
        when = datetime.date.fromisoformat(day) if day else today - datetime.timedelta(days=1)
    try:
        return run_day(when).status
    except Exception as exc:
        raise self.retry(exc=exc, countdown=300 * (self.request.retries + 1)) from exc
