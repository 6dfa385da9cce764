"""Tenants, memberships with roles, EnMasse-style plans with credits, quotas and API tokens."""
import hashlib
import secrets
import uuid

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from .router_policy import validate_router_policy

SLUG = RegexValidator(
    r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
    "Use 1 to 63 lower-case letters, digits and '-', starting and ending with a letter or digit.",
)


class Role(models.TextChoices):
    OWNER = "owner"
    ADMIN = "admin"
    VIEWER = "viewer"


class AddressSpaceType(models.TextChoices):
    STANDARD = "standard"
    BROKERED = "brokered"


class AddressType(models.TextChoices):
    QUEUE = "queue"
    TOPIC = "topic"
    ANYCAST = "anycast"
    MULTICAST = "multicast"
    SUBSCRIPTION = "subscription"
    DEADLETTER = "deadletter"


class TenantQuerySet(models.QuerySet):
    def live(self):
        """Tenants not deleted: the only ones anybody can see or use."""
        return self.filter(deleted_at__isnull=True)


class Tenant(models.Model):
    """An organisation: owns address spaces, has members and a quota.

    A deleted tenant keeps its row, so its audit trail and usage history stay; its name is
    freed (the slug gets a `~<uid>` suffix) once its address spaces are gone.
    """

    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    # 63 characters of SLUG, plus room for the suffix a deleted tenant's name gets.
    slug = models.CharField(max_length=100, unique=True, validators=[SLUG])
    name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    deleted_at = models.DateTimeField(null=True, blank=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    """A user's role in one tenant."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=10, choices=Role.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user"], name="one_membership_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.role} of {self.tenant}"


class Invitation(models.Model):
    """An owner's invitation of an email address to a role in a tenant.

    Accepted by whoever signs in with that address (a verified one, from the provider) and opens
    the link, or at once at sign-in. Only the SHA-256 digest of the link's token is stored.
    """

    PENDING, ACCEPTED, REVOKED, EXPIRED = "Pending", "Accepted", "Revoked", "Expired"

    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField()
    role = models.CharField(max_length=10, choices=Role.choices)
    digest = models.CharField(max_length=64, unique=True)
    invited_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL,
                                   null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL,
                                    null=True, blank=True, related_name="+")
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["tenant", "email"])]

    def __str__(self) -> str:
        return f"{self.email} as {self.role} of {self.tenant}"

    def phase(self, now) -> str:
        if self.accepted_at:
            return self.ACCEPTED
        if self.revoked_at:
            return self.REVOKED
        return self.EXPIRED if self.expires_at <= now else self.PENDING


# The limits an operator sets (tenant.quota_changed carries all of them).
QUOTA_FIELDS = ("max_address_spaces", "max_addresses", "max_messaging_users", "max_credits",
                "messages_per_day", "bytes_per_day", "stored_bytes", "peak_connections")


class TenantQuota(models.Model):
    """Tenant-wide caps across all its address spaces; empty means unlimited."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="quota")
    max_address_spaces = models.PositiveIntegerField(null=True, blank=True, default=10)
    max_addresses = models.PositiveIntegerField(null=True, blank=True, default=10000)
    max_messaging_users = models.PositiveIntegerField(null=True, blank=True, default=1000)
    # Credits summed over all the tenant's address spaces (router + broker instances).
    max_credits = models.FloatField(null=True, blank=True)
    # Usage limits, evaluated nightly by the Spark jobs; empty means unlimited.
    messages_per_day = models.BigIntegerField(null=True, blank=True)
    bytes_per_day = models.BigIntegerField(null=True, blank=True)
    stored_bytes = models.BigIntegerField(null=True, blank=True)
    peak_connections = models.BigIntegerField(null=True, blank=True)
    # What a breach does: "refuse-senders" (new senders get amqp:resource-limit-exceeded).
    throttle_action = models.CharField(max_length=20, default="refuse-senders")
    # Enforcement state, changed only by tenants.services.throttle/unthrottle (with events).
    throttled = models.BooleanField(default=False)
    throttled_limits = models.JSONField(default=list, blank=True)
    # An operator override: no throttling until then (a breach is still recorded).
    override_until = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"quota of {self.tenant}"


class PlanDisplay(models.Model):
    """Display fields shared by both kinds of plan (EnMasse's displayName, ...)."""

    name = models.CharField(max_length=100, unique=True, validators=[SLUG])
    display_name = models.CharField(max_length=200, blank=True)
    display_order = models.IntegerField(default=0)
    short_description = models.CharField(max_length=300, blank=True)
    long_description = models.TextField(blank=True)
    resource_version = models.PositiveIntegerField(default=1)

    class Meta:
        abstract = True
        ordering = ["display_order", "name"]

    def __str__(self) -> str:
        return self.name


class AddressPlan(PlanDisplay):
    """What an address of one type costs in router and broker credits, and its broker settings."""

    address_type = models.CharField(max_length=20, choices=AddressType.choices)
    # {"router": float, "broker": float}; 1.0 is one router or broker instance.
    resources = models.JSONField(default=dict, blank=True)
    partitions = models.PositiveIntegerField(default=1)
    # {"minimum": ms, "maximum": ms}
    message_ttl = models.JSONField(default=dict, blank=True)
    # {"maximumDeliveryAttempts", "redeliveryDelay", "redeliveryDelayMultiplier", "maximumDeliveryDelay"}
    message_redelivery = models.JSONField(default=dict, blank=True)


class AddressSpacePlan(PlanDisplay):
    """Caps on the credits a space may use, and the address plans it offers."""

    address_space_type = models.CharField(max_length=20, choices=AddressSpaceType.choices)
    # {"router": float, "broker": float, "aggregate": float}; a missing key is no limit.
    resource_limits = models.JSONField(default=dict, blank=True)
    address_plans = models.ManyToManyField(AddressPlan, related_name="space_plans", blank=True)
    infra_config_ref = models.CharField(max_length=100, blank=True, default="default")
    # {"maxConnections", "maxSessions", "maxSenders", "maxReceivers"} over the operator's
    # settings.MAAS_ROUTER_POLICY; a missing key keeps the setting.
    router_policy = models.JSONField(default=dict, blank=True,
                                     validators=[validate_router_policy])


class PersonalAccessToken(models.Model):
    """An API token for automation; only its SHA-256 digest is stored."""

    PREFIX = "maas_pat_"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, default="default")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"{self.name} of {self.user}"

    @staticmethod
    def digest_of(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    @classmethod
    def issue(cls, user, name: str = "default") -> tuple["PersonalAccessToken", str]:
        """Create a token; the plain value is returned once and never stored."""
        token = cls.PREFIX + secrets.token_urlsafe(32)
        return cls.objects.create(user=user, name=name, digest=cls.digest_of(token)), token


from .usage import (  # noqa: E402 - models of the usage results live in their own module
    AddressUsageDaily,
    AddressUsageHourly,
    QuotaEvaluation,
    SpacePeakHourly,
    TenantUsageDaily,
    UsageJobRun,
)

__all__ = [
    "AddressPlan", "AddressSpacePlan", "AddressUsageDaily", "AddressUsageHourly", "Invitation",
    "Membership",
    "PersonalAccessToken", "QuotaEvaluation", "SpacePeakHourly", "Tenant", "TenantQuota",
    "TenantUsageDaily", "UsageJobRun",
]
