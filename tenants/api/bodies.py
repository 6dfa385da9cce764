"""The tenant and tenant-quota bodies: rendered from the models, and the limits of a posted
TenantQuota read."""
from core.api.manifests import MAAS_API, read, timestamp
from core.errors import Invalid

from ..models import QUOTA_FIELDS


def tenant(t, role: str | None, terminating_spaces: list[str] | None = None) -> dict:
    status = {"role": role, "phase": "Active"}
    if t.deleted_at is not None:
        status = {"role": None, "phase": "Terminating", "deletionTimestamp": timestamp(t.deleted_at),
                  "terminatingAddressSpaces": terminating_spaces or []}
    return {
        "apiVersion": MAAS_API,
        "kind": "Tenant",
        "metadata": {"name": t.slug, "uid": str(t.uid), "creationTimestamp": timestamp(t.created_at)},
        "spec": {"displayName": t.name},
        "status": status,
    }


def tenant_quota(quota) -> dict:
    """A tenant's limits (spec: operators set them) and their enforcement (status)."""
    return {
        "apiVersion": MAAS_API,
        "kind": "TenantQuota",
        "metadata": {"name": quota.tenant.slug},
        "spec": {field: getattr(quota, field) for field in QUOTA_FIELDS},
        "status": {
            "throttled": quota.throttled,
            "throttledLimits": quota.throttled_limits,
            "throttleAction": quota.throttle_action,
            "overrideUntil": timestamp(quota.override_until) if quota.override_until else None,
        },
    }




def quota_spec(body, partial: bool) -> dict:
    """The limits of a posted TenantQuota: every one for PUT, some for PATCH; the service
    checks their values."""
    _, spec = read(body, "TenantQuota")
    for key in spec:
        if key not in QUOTA_FIELDS:
            raise Invalid(f"unknown quota field; the limits are {', '.join(QUOTA_FIELDS)}",
                          f"spec.{key}")
    missing = [field for field in QUOTA_FIELDS if field not in spec]
    if missing and not partial:
        raise Invalid("PUT sets every limit (null: no limit); PATCH changes some",
                      f"spec.{missing[0]}")
    return spec
