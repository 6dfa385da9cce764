"""The append-only config log, its per-stream sequence counters and the transactional outbox."""
from django.db import models


class EventStream(models.Model):
    """One gap-free sequence of events: an address space's, a tenant's own, or the one global
    stream of the operators' plans (no tenant).

    The row is locked (SELECT ... FOR UPDATE) to hand out the next sequence number; it is never
    deleted, so a stream's numbering survives the deletion of its address space.
    """

    ADDRESS_SPACE = "address_space"
    TENANT = "tenant"
    PLANS = "plans"

    uid = models.UUIDField(primary_key=True)
    kind = models.CharField(max_length=20)
    # Empty only for the plans stream: plans belong to the platform, not to a tenant.
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+",
                               null=True, blank=True)
    last_sequence = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "config_service_eventstream"  # the table it had before the log had its app

    def __str__(self) -> str:
        return f"{self.kind} {self.uid} @{self.last_sequence}"


class ConfigEvent(models.Model):
    """One immutable, versioned record of a config change."""

    position = models.BigAutoField(primary_key=True)  # global order of the log
    stream = models.ForeignKey(EventStream, on_delete=models.PROTECT, related_name="events")
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+",
                               null=True, blank=True)  # empty: a plan event
    sequence = models.PositiveIntegerField()  # per stream, from 1, without gaps
    type = models.CharField(max_length=60)  # past tense: address.created
    schema_version = models.PositiveSmallIntegerField(default=1)
    payload = models.JSONField()
    actor = models.CharField(max_length=200)
    request_id = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        db_table = "config_service_configevent"
        ordering = ["position"]
        constraints = [
            models.UniqueConstraint(fields=["stream", "sequence"], name="one_event_per_sequence")
        ]
        indexes = [models.Index(fields=["tenant", "position"])]

    def __str__(self) -> str:
        return f"#{self.position} {self.type} ({self.stream_id}@{self.sequence})"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise ValueError("Config events are immutable.")
        super().save(*args, **kwargs)


class Outbox(models.Model):
    """An event still to be delivered to its agents; the relay re-sends unacknowledged rows."""

    event = models.OneToOneField(ConfigEvent, on_delete=models.CASCADE, related_name="outbox")
    stream_uid = models.UUIDField(db_index=True)
    sequence = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    attempts = models.PositiveIntegerField(default=0)
    last_sent_at = models.DateTimeField(null=True, blank=True)
    acked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "config_service_outbox"
        indexes = [
            models.Index(
                fields=["created_at"],
                name="outbox_pending",
                condition=models.Q(acked_at__isnull=True),
            )
        ]

    def __str__(self) -> str:
        return f"outbox {self.event_id} ({'acked' if self.acked_at else 'pending'})"
