"""The /metrics families the alert rules need beyond address counts (deploy/monitoring):
the outbox's backlog and age, throttled tenants and the usage job's last runs (agent errors,
one sample per space and agent kind, are written with the per-space gauges: metrics.py).

Three queries whatever the fleet: one aggregate over the pending outbox rows (the partial index
outbox_pending), one over the tenant quotas, one over the usage job runs.
"""
from django.db.models import Count, Max, Min, Q
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from eventlog.models import Outbox
from tenants.models import TenantQuota
from tenants.usage import UsageJobRun


def outbox_families():
    pending = Outbox.objects.filter(acked_at__isnull=True).aggregate(
        n=Count("id"), oldest=Min("created_at"))
    yield GaugeMetricFamily("maas_outbox_backlog", "Config events not yet applied by agents",
                            value=pending["n"])
    age = (timezone.now() - pending["oldest"]).total_seconds() if pending["oldest"] else 0
    yield GaugeMetricFamily("maas_outbox_oldest_pending_age_seconds",
                            "Age of the oldest config event not yet applied (0: none pending)",
                            value=max(age, 0.0))


def throttled_family():
    family = GaugeMetricFamily("maas_tenant_throttled",
                               "1 while the tenant is throttled for exceeding a usage quota",
                               labels=["namespace"])
    for slug, throttled in TenantQuota.objects.filter(tenant__deleted_at__isnull=True) \
            .values_list("tenant__slug", "throttled").order_by("tenant__slug"):
        family.add_metric([slug], 1 if throttled else 0)
    return family


def usage_job_families():
    runs = UsageJobRun.objects.aggregate(
        success=Max("finished_at", filter=Q(status=UsageJobRun.SUCCEEDED)),
        failure=Max("finished_at", filter=Q(status=UsageJobRun.FAILED)))
    for outcome, doc in (("success", "succeeded"), ("failure", "failed")):
        when = runs[outcome]
        yield GaugeMetricFamily(
            f"maas_usage_job_last_{outcome}_timestamp_seconds",
            f"When a usage job run last {doc} (Unix time; 0: never)",
            value=when.timestamp() if when else 0)
