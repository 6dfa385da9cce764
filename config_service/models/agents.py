"""What the agents report: the sequence each applied per address space, and their errors; and
the incarnation of each router they configure."""
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
    # When the agent last compared the whole space with its target (a full diff): the drift
    # check's clock. The short paths (only the new addresses, or none of the agent's) move
    # `applied_at` but not this, so a busy space still gets its drift check.
    checked_at = models.DateTimeField(null=True, blank=True)
    # Why what the agent applied no longer holds (its router restarted empty), shown as the
    # status message; the agent's next reconcile clears it. Empty: the state counts.
    invalidated = models.CharField(max_length=200, blank=True)
    invalidated_at = models.DateTimeField(null=True, blank=True)  # a reconcile started later
    # repairs it; one that started earlier (and ran meanwhile) does not clear it

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["space_uid", "kind"], name="one_state_per_agent")
        ]

    def __str__(self) -> str:
        return f"{self.kind} of {self.space_uid} @{self.applied_sequence}"


class AppliedEvent(models.Model):
    """One event applied by one agent kind: the time it took, and proof it counted once."""

    event = models.ForeignKey("eventlog.ConfigEvent", on_delete=models.CASCADE, related_name="applied")
    kind = models.CharField(max_length=20)
    applied_at = models.DateTimeField()
    latency_seconds = models.FloatField()  # from event appended to applied and verified

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["event", "kind"], name="applied_once_per_agent")
        ]

    def __str__(self) -> str:
        return f"{self.kind} applied {self.event_id}"


class RouterIncarnation(models.Model):
    """The run of a router the agents configured, by management URL: a new one is empty."""

    management_url = models.CharField(max_length=500, unique=True)
    # Names this run: the watch leaves it on the router in a marker entity, so a router that
    # lost its configuration (restarted, however quickly) is told by the marker missing.
    token = models.CharField(max_length=32)
    # now - uptimeSeconds when first seen: the same for every reading of one run of the router
    # (within a second or so), later for a restarted one.
    started_at = models.DateTimeField()
    uptime_seconds = models.PositiveBigIntegerField()
    checked_at = models.DateTimeField()
    restarts = models.PositiveIntegerField(default=0)  # seen by the watch since first recorded

    def __str__(self) -> str:
        return f"{self.management_url} started {self.started_at:%Y-%m-%d %H:%M:%S}"
