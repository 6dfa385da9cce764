"""Projections: the current desired state of address spaces, addresses and messaging users.

Only `config_service.projections.apply` writes these rows, always from a ConfigEvent, so a
rebuild from the log gives the same rows (`manage.py rebuild_projections --check`).
"""
from django.db import models


class AddressSpace(models.Model):
    """A tenant's isolated messaging namespace (EnMasse AddressSpace)."""

    uid = models.UUIDField(unique=True)  # = its EventStream uid
    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="address_spaces"
    )
    name = models.CharField(max_length=63)
    type = models.CharField(max_length=20)
    plan = models.CharField(max_length=100)
    plan_status = models.JSONField(default=dict)  # snapshot of the plan when applied
    spec = models.JSONField(default=dict)  # the rest of the EnMasse spec, kept as given
    resource_version = models.PositiveIntegerField()  # sequence of the last event changing it
    last_sequence = models.PositiveIntegerField()  # sequence of the last event in its stream
    terminating = models.BooleanField(default=False)
    # The broker of the pool it was placed on at creation (config_service.brokers);
    # "" the shared one. Never changes: its vhost, queues and messages live there.
    broker = models.CharField(max_length=32, blank=True, default="")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["tenant_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="space_name_per_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.name}"

    @property
    def vhost(self) -> str:
        """The broker vhost and router vhost name of this space."""
        return f"{self.tenant.slug}.{self.name}"


class Address(models.Model):
    """An address in one address space (EnMasse Address)."""

    space = models.ForeignKey(AddressSpace, on_delete=models.CASCADE, related_name="addresses")
    name = models.CharField(max_length=253)  # metadata.name: "<space>.<suffix>"
    address = models.CharField(max_length=250)  # spec.address, the wire name
    type = models.CharField(max_length=20)
    plan = models.CharField(max_length=100)
    plan_status = models.JSONField(default=dict)
    topic = models.CharField(max_length=250, blank=True)  # subscription: its topic address
    deadletter = models.CharField(max_length=250, blank=True)
    expiry = models.CharField(max_length=250, blank=True)
    spec = models.JSONField(default=dict)  # messageTtl, messageRedelivery, subscription
    scheduled = models.BooleanField(default=False)  # False: Pending (see pending_reason)
    pending_reason = models.CharField(max_length=300, blank=True)
    placement = models.JSONField(default=list)  # brokerStatuses: [{clusterId, containerId, state}]
    resource_version = models.PositiveIntegerField()
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["space_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["space", "name"], name="address_name_per_space"),
            models.UniqueConstraint(fields=["space", "address"], name="address_per_space"),
        ]
        indexes = [
            models.Index(fields=["space", "type"]),
            # The few Pending addresses, counted per scrape of /metrics (maas.metrics).
            models.Index(fields=["space", "type"], condition=models.Q(scheduled=False),
                         name="address_unscheduled"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def broker_object_name(self) -> str:
        """The broker object's name: a subscription's queue is `<topic>::<subscription>`."""
        return broker_object_name(self.type, self.address, self.topic)


def broker_object_name(type: str, address: str, topic: str) -> str:
    """`Address.broker_object_name` from the three columns, for callers that read tuples."""
    return f"{topic}::{address}" if type == "subscription" else address


class MessagingUser(models.Model):
    """A credential for messaging clients in one address space, with authorization rules."""

    space = models.ForeignKey(AddressSpace, on_delete=models.CASCADE, related_name="users")
    name = models.CharField(max_length=253)  # metadata.name: "<space>.<username>"
    username = models.CharField(max_length=100)
    # RabbitMQ's rabbit_password_hashing_sha256 (salted); routers and brokers verify it.
    password_hash = models.CharField(max_length=100)
    authorization = models.JSONField(default=list)  # [{"addresses": [...], "operations": [...]}]
    resource_version = models.PositiveIntegerField()
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["space_id", "username"]
        constraints = [
            models.UniqueConstraint(fields=["space", "username"], name="username_per_space")
        ]

    def __str__(self) -> str:
        return self.name
