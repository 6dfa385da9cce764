"""OpenAPI types of the tenant and tenant-quota bodies: they describe what `bodies.py` renders
and what a posted manifest may hold (core/api/schemas.py says why they do not render)."""
from rest_framework import serializers as s

from core.api.manifests import MAAS_API
from core.api.schemas import Described, NamedManifestMeta, always, list_of
from core.limits import MAX_DISPLAY_NAME

from ..models import Role

ROLES = Role.values


class ThrottledLimit(Described):
    """A breached limit, as `tenant.throttled` recorded it."""

    limit = s.CharField(help_text="messages_per_day, bytes_per_day, stored_bytes or "
                                  "peak_connections.")
    used = s.IntegerField(help_text="What was measured (docs/usage.md, \"Quotas\").")
    limit_value = s.IntegerField(help_text="The limit it is over.")


class TenantMeta(Described):
    name = s.CharField()
    uid = s.UUIDField()
    creationTimestamp = s.DateTimeField()


class TenantSpec(Described):
    displayName = s.CharField(allow_blank=True, required=False,
                              max_length=MAX_DISPLAY_NAME)


class TenantStatus(Described):
    role = s.ChoiceField(choices=ROLES, allow_null=True,
                         help_text="Yours; null for staff who are not a member, and once "
                                   "Terminating.")
    phase = s.ChoiceField(choices=["Active", "Terminating"])
    deletionTimestamp = s.DateTimeField(required=False)
    terminatingAddressSpaces = s.ListField(child=s.CharField(), required=False,
                                           help_text="Being torn down (in the answer to DELETE).")


class Tenant(Described):
    apiVersion = always(MAAS_API)
    kind = always("Tenant")
    metadata = TenantMeta()
    spec = TenantSpec()
    status = TenantStatus()


class TenantManifest(Described):
    apiVersion = s.CharField(required=False)
    kind = s.CharField(required=False, help_text="Tenant, if given.")
    metadata = NamedManifestMeta()
    spec = TenantSpec(required=False)


TenantList = list_of(Tenant, "TenantList", MAAS_API)




_INT, _BIG = 2**31 - 1, 2**63 - 1  # the columns' ranges (PostgreSQL integer and bigint)
_LIMITS = {  # field: (help text, highest value; None: a number, not an integer)
    "max_address_spaces": ("Address spaces at a time.", _INT),
    "max_addresses": ("Addresses over all its address spaces.", _INT),
    "max_messaging_users": ("Messaging users over all its address spaces.", _INT),
    "max_credits": ("Router and broker credits over all its address spaces (1.0: one "
                    "instance).", None),
    "messages_per_day": ("messages_in + messages_out in one UTC day (docs/usage.md).", _BIG),
    "bytes_per_day": ("bytes_in + bytes_out in one UTC day (docs/usage.md).", _BIG),
    "stored_bytes": ("Peak of the stored bytes, per hour summed over address spaces.", _BIG),
    "peak_connections": ("Peak of the client connections, per hour summed over address "
                         "spaces.", _BIG),
}


def _limit(help_text: str, maximum: int | None, required: bool) -> s.Field:
    if maximum is None:
        return s.FloatField(allow_null=True, min_value=0, required=required, help_text=help_text)
    return s.IntegerField(allow_null=True, min_value=0, max_value=maximum, required=required,
                          help_text=help_text)


def _quota_spec(name: str, required: bool, doc: str) -> type[s.Serializer]:
    fields = {key: _limit(text, top, required) for key, (text, top) in _LIMITS.items()}
    return type(name, (Described,), {**fields, "__doc__": doc})


TenantQuotaSpec = _quota_spec(
    "TenantQuotaSpec", True,
    "The tenant's limits; null is no limit. Over a usage limit (per day or peak, "
    "docs/quotas.md) the tenant is throttled: new senders are refused.")
TenantQuotaPatchSpec = _quota_spec(
    "TenantQuotaPatchSpec", False, "Some of the limits; the others stay. Null is no limit.")


class TenantQuotaStatus(Described):
    throttled = s.BooleanField(help_text="Over a usage limit: new senders are refused.")
    throttledLimits = ThrottledLimit(many=True)
    throttleAction = s.CharField(help_text="What a breach does: `refuse-senders`.")
    overrideUntil = s.DateTimeField(allow_null=True, help_text="An operator override: no "
                                                               "throttling until then.")


class TenantQuotaMeta(Described):
    name = s.CharField(help_text="The tenant's name.")


class TenantQuota(Described):
    apiVersion = always(MAAS_API)
    kind = always("TenantQuota")
    metadata = TenantQuotaMeta()
    spec = TenantQuotaSpec()
    status = TenantQuotaStatus()


class TenantQuotaUpdate(Described):
    """PUT: every limit (operators). Any other key of `spec` is refused, naming it."""

    apiVersion = s.CharField(required=False)
    kind = s.CharField(required=False, help_text="TenantQuota, if given.")
    spec = TenantQuotaSpec()


class TenantQuotaPatch(Described):
    """PATCH: some limits (operators). Any other key of `spec` is refused, naming it."""

    apiVersion = s.CharField(required=False)
    kind = s.CharField(required=False, help_text="TenantQuota, if given.")
    spec = TenantQuotaPatchSpec()
