"""Reads AddressPlan and AddressSpacePlan specs (EnMasse's admin.enmasse.io/v1beta2 shapes) into
the plans' fields, and back; an omitted optional field takes its default, each error names its
field."""
import math

from django.core.exceptions import ValidationError

from core.errors import Invalid
from core.limits import display_name, has_control, printable
from tenants.models import SLUG, AddressSpaceType, AddressType
from tenants.router_policy import validate_router_policy

from . import infra_configs, validation

DISPLAY_KEYS = ("displayName", "displayOrder", "shortDescription", "longDescription")
ADDRESS_PLAN_KEYS = ("addressType", "resources", "partitions", "messageTtl",
                     "messageRedelivery", *DISPLAY_KEYS)
SPACE_PLAN_KEYS = ("addressSpaceType", "addressPlans", "resourceLimits", "routerPolicy",
                   "infraConfigRef", *DISPLAY_KEYS)
RESOURCE_KEYS = ("router", "broker")
LIMIT_KEYS = ("router", "broker", "aggregate")
# Credits beyond this are typos, not plans (standard-unlimited caps at 10,000).
MAX_CREDITS = 1_000_000.0
MAX_PARTITIONS = 100
MAX_DESCRIPTION = 10_000
DEFAULT_INFRA_CONFIG = infra_configs.DEFAULT


def plan_name(value) -> str:
    if not isinstance(value, str) or not SLUG.regex.match(value):
        raise Invalid(SLUG.message, "metadata.name")
    return value


def _known(spec, keys: tuple[str, ...], kind: str) -> dict:
    if not isinstance(spec, dict):
        raise Invalid("must be an object", "spec")
    for key in spec:
        if key not in keys:
            raise Invalid(f"unknown field; an {kind} takes {', '.join(keys)}",
                          f"spec.{printable(key)}")
    return spec


def _text(value, field: str, limit: int) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > limit or has_control(value):
        raise Invalid(f"must be text of at most {limit} characters, no control characters",
                      field)
    return value


def _display(spec: dict) -> dict:
    order = spec.get("displayOrder", 0)
    if order is None:
        order = 0
    if isinstance(order, bool) or not isinstance(order, int) or abs(order) > 2**31 - 1:
        raise Invalid("must be an integer", "spec.displayOrder")
    return {
        "display_name": display_name(spec.get("displayName")),
        "display_order": order,
        "short_description": _text(spec.get("shortDescription"), "spec.shortDescription", 300),
        "long_description": _text(spec.get("longDescription"), "spec.longDescription",
                                  MAX_DESCRIPTION),
    }


def _credits(value, keys: tuple[str, ...], field: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Invalid(f"must be an object with {', '.join(keys)}", field)
    out = {}
    for key, amount in value.items():
        if key not in keys:
            raise Invalid(f"unknown credit; use {', '.join(keys)}", f"{field}.{printable(key)}")
        if amount is None:
            continue  # no limit / no cost
        if isinstance(amount, bool) or not isinstance(amount, int | float) or not (
                math.isfinite(amount) and 0 <= amount <= MAX_CREDITS):
            raise Invalid(f"must be a number from 0 to {MAX_CREDITS:g} (1.0 is one instance)",
                          f"{field}.{key}")
        out[key] = float(amount)
    return out


def _choice(value, choices: list[str], field: str) -> str:
    if value not in choices:
        raise Invalid(f"must be one of {', '.join(choices)}", field)
    return value


def address_plan_fields(spec, kept=None) -> dict:
    """The AddressPlan's fields from a whole spec (PUT, POST, or PATCH once merged); `kept`:
    the plan as stored before a change (what it held that is not enforced may stay)."""
    spec = _known(spec, ADDRESS_PLAN_KEYS, "AddressPlan")
    partitions = spec.get("partitions", 1)
    if partitions is None:
        partitions = 1
    if isinstance(partitions, bool) or not isinstance(partitions, int) or not (
            1 <= partitions <= MAX_PARTITIONS):
        raise Invalid(f"must be an integer from 1 to {MAX_PARTITIONS}", "spec.partitions")
    return {
        "address_type": _choice(spec.get("addressType"), AddressType.values, "spec.addressType"),
        "resources": _credits(spec.get("resources"), RESOURCE_KEYS, "spec.resources"),
        "partitions": partitions,
        "message_ttl": validation.message_ttl(
            spec.get("messageTtl"), kept.message_ttl if kept is not None else None),
        "message_redelivery": validation.message_redelivery(
            spec.get("messageRedelivery"), kept.message_redelivery if kept is not None else None),
        **_display(spec),
    }


def space_plan_fields(spec, kept=None) -> dict:
    """The AddressSpacePlan's fields from a whole spec; `address_plans` is a list of names,
    whose existence the service checks. `kept`: the plan as stored before a change (an infra
    config it names that is no longer defined may stay: its spaces get the platform's sizes)."""
    spec = _known(spec, SPACE_PLAN_KEYS, "AddressSpacePlan")
    names = spec.get("addressPlans") or []
    if not isinstance(names, list):
        raise Invalid("must be a list of address plan names", "spec.addressPlans")
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name:
            raise Invalid("must be an address plan name", f"spec.addressPlans[{i}]")
    policy = spec.get("routerPolicy") or {}
    try:
        validate_router_policy(policy)
    except ValidationError as error:
        raise Invalid(" ".join(error.messages), "spec.routerPolicy") from None
    infra = spec.get("infraConfigRef")
    infra = DEFAULT_INFRA_CONFIG if infra in (None, "") else infra
    if not isinstance(infra, str) or not SLUG.regex.match(infra):
        raise Invalid(SLUG.message, "spec.infraConfigRef")
    if infra not in infra_configs.configs() and (kept is None or infra != kept.infra_config_ref):
        raise Invalid(f"unknown infra config {infra!r}; the operator's are "
                      f"{', '.join(infra_configs.names())} (MAAS_INFRA_CONFIGS)",
                      "spec.infraConfigRef")
    return {
        "address_space_type": _choice(spec.get("addressSpaceType"), AddressSpaceType.values,
                                      "spec.addressSpaceType"),
        "address_plans": list(dict.fromkeys(names)),  # as given: errors name their index
        "resource_limits": _credits(spec.get("resourceLimits"), LIMIT_KEYS,
                                    "spec.resourceLimits"),
        "router_policy": dict(policy),
        "infra_config_ref": infra,
        **_display(spec),
    }


def address_plan_spec(plan) -> dict:
    """The spec of a stored AddressPlan, as the API shows it (and PATCH merges into)."""
    spec = {
        "addressType": plan.address_type,
        "resources": plan.resources,
        "partitions": plan.partitions,
        "displayName": plan.display_name,
        "displayOrder": plan.display_order,
        "shortDescription": plan.short_description,
        "longDescription": plan.long_description,
    }
    if plan.message_ttl:
        spec["messageTtl"] = plan.message_ttl
    if plan.message_redelivery:
        spec["messageRedelivery"] = plan.message_redelivery
    return spec


def space_plan_spec(plan, address_plans: list[str]) -> dict:
    return {
        "addressSpaceType": plan.address_space_type,
        "resourceLimits": plan.resource_limits,
        "routerPolicy": plan.router_policy,
        "addressPlans": address_plans,
        "infraConfigRef": plan.infra_config_ref,
        "displayName": plan.display_name,
        "displayOrder": plan.display_order,
        "shortDescription": plan.short_description,
        "longDescription": plan.long_description,
    }
