"""What the agents report: the sequence each applied per address space, and their errors."""
from django.db import models


class AgentState(models.Model):
    """The position and conditions of one agent kind for one address space."""

    space_uid = models.UUIDField()
    kind = models.CharField(max_length=20)  # "storage", "router"
    applied_sequence = models.PositiveIntegerField(default=0)
    applied_at = models.DateTimeField(null=True, blank=True)
    # Address names mapped to {"message": str, "permanent": bool}.
    address_errors = models.JSONField(default=dict, blank=True)
    space_error = models.CharField(max_length=500, blank=True)
    torn_down = models.BooleanField(default=False)
    last_resync_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["space_uid", "kind"], name="one_state_per_agent")
        ]

    def __str__(self) -> str:
        return f"{self.kind} of {self.space_uid} @{self.applied_sequence}"


class AppliedEvent(models.Model):
    """One event applied by one agent kind: the time it took, and proof it counted once."""

    event = models.ForeignKey("ConfigEvent", on_delete=models.CASCADE, related_name="applied")
    kind = models.CharField(max_length=20)
    applied_at = models.DateTimeField()
    latency_seconds = models.FloatField()  # from event appended to applied and verified

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["event", "kind"], name="applied_once_per_agent")
        ]

    def __str__(self) -> str:
        return f"{self.kind} applied {self.event_id}"
