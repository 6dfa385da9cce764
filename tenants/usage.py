"""Usage results of the nightly Spark jobs and the state of tenant quotas over them.

Rows are written per day by `workers.usage.job` (a re-run replaces that day's rows), read by the
usage API and the admin. Counters are messages and bytes in (published) and out (delivered).
"""
from django.db import models


class UsageCounters(models.Model):
    messages_in = models.BigIntegerField(default=0)
    messages_out = models.BigIntegerField(default=0)
    bytes_in = models.BigIntegerField(default=0)
    bytes_out = models.BigIntegerField(default=0)
    stored_messages = models.BigIntegerField(default=0)  # peak of the gauge
    stored_bytes = models.BigIntegerField(default=0)  # peak of the gauge

    class Meta:
        abstract = True


class AddressUsageDaily(UsageCounters):
    """One address's usage on one day."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    space = models.CharField(max_length=63)
    address = models.CharField(max_length=250)
    day = models.DateField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "space", "address", "day"],
                                               name="address_usage_per_day")]
        indexes = [models.Index(fields=["tenant", "day"])]


class AddressUsageHourly(UsageCounters):
    """One address's usage in one hour."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    space = models.CharField(max_length=63)
    address = models.CharField(max_length=250)
    hour = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "space", "address", "hour"],
                                               name="address_usage_per_hour")]
        indexes = [models.Index(fields=["tenant", "hour"])]


class SpacePeakHourly(models.Model):
    """Hourly peaks of one address space: connections, links, addresses, stored bytes."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    space = models.CharField(max_length=63)
    hour = models.DateTimeField()
    connections = models.BigIntegerField(default=0)
    senders = models.BigIntegerField(default=0)
    receivers = models.BigIntegerField(default=0)
    addresses = models.BigIntegerField(default=0)
    stored_bytes = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "space", "hour"],
                                               name="space_peak_per_hour")]


class TenantUsageDaily(models.Model):
    """A tenant's day: what its quotas are measured against."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    messages = models.BigIntegerField(default=0)  # in + out
    bytes = models.BigIntegerField(default=0)  # in + out
    stored_bytes = models.BigIntegerField(default=0)  # peak
    connections = models.BigIntegerField(default=0)  # peak

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "day"],
                                               name="tenant_usage_per_day")]
        ordering = ["-day", "-messages"]


class QuotaEvaluation(models.Model):
    """One limit of one tenant on one day: used, share, breach and the forecast day."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    limit = models.CharField(max_length=30)  # messages_per_day, bytes_per_day, ...
    used = models.BigIntegerField()
    limit_value = models.BigIntegerField(null=True)
    share = models.FloatField(null=True)
    breached = models.BooleanField(default=False)
    forecast_day = models.DateField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "day", "limit"],
                                               name="quota_evaluation_per_day")]


class UsageJobRun(models.Model):
    """One run of the nightly usage job for one day, for operators to follow."""

    RUNNING, SUCCEEDED, FAILED = "running", "succeeded", "failed"

    day = models.DateField(db_index=True)
    status = models.CharField(max_length=10, default=RUNNING)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    seconds = models.FloatField(null=True, blank=True)
    rows = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"usage job {self.day} {self.status}"
