"""The infra configurations an address space plan names in `infraConfigRef` (EnMasse's
StandardInfraConfig): the size of a standard space's router and brokers on Kubernetes.

An operator defines them in `MAAS_INFRA_CONFIGS` (JSON: name -> config); each config holds
only what it changes from the platform's sizes (MAAS_BROKER_STORAGE and the defaults of
workers/infra/manifests.py):

    {"router": {"minReplicas": 1, "resources": {"memory": "256Mi", "cpu": "100m"}},
     "broker": {"minReplicas": 3, "resources": {"memory": "1Gi", "cpu": "250m",
                "storage": "2Gi"}, "storageClassName": "fast"}}

`broker.minReplicas` is the nodes of each broker of the space (MAAS_BROKER_REPLICAS by
default): from 2 on a broker is a RabbitMQ cluster whose queues are quorum queues, so a node
lost loses no acknowledged message (docs/deploy.md).

A plan that names an unknown config is refused (400). On one machine every space shares the
platform's router and broker, so the configs size nothing there (docs/api.md, "Plans")."""
import json
import re

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

DEFAULT = "default"
# The two EnMasse's example plans name; the operator's MAAS_INFRA_CONFIGS adds or replaces.
BUILT_IN = {
    "default": {},
    "default-minimal": {"router": {"resources": {"memory": "128Mi"}},
                        "broker": {"resources": {"memory": "512Mi", "storage": "1Gi"}}},
}
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
_KEYS = {"router": {"minReplicas", "resources"},
         "broker": {"minReplicas", "resources", "storageClassName"}}
_RESOURCES = {"router": {"memory", "cpu"}, "broker": {"memory", "cpu", "storage"}}
MAX_MIN_REPLICAS = 16


def configs() -> dict[str, dict]:
    """Every known infra config by name, validated (ImproperlyConfigured names the bad part)."""
    raw = getattr(settings, "MAAS_INFRA_CONFIGS", "") or {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise ImproperlyConfigured(f"MAAS_INFRA_CONFIGS is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ImproperlyConfigured("MAAS_INFRA_CONFIGS must map names to infra configs")
    found = {**BUILT_IN, **raw}
    for name, config in found.items():
        problem = _problem(config)
        if problem:
            raise ImproperlyConfigured(f"MAAS_INFRA_CONFIGS[{name!r}]: {problem}")
    return found


def names() -> list[str]:
    return sorted(configs())


def get(name: str | None) -> dict:
    """The config of that name; {} (the platform's sizes) for a name no longer defined."""
    return configs().get(name or DEFAULT, {})


def check(**kwargs) -> list:
    """A Django system check: a bad MAAS_INFRA_CONFIGS stops `manage.py check` and every
    process's start, not the first plan that names a config."""
    try:
        configs()
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), id="maas.E001")]
    return []


def _problem(config) -> str:
    if not isinstance(config, dict) or set(config) - set(_KEYS):
        return "takes router and broker"
    for part, allowed in _KEYS.items():
        section = config.get(part, {})
        if not isinstance(section, dict) or set(section) - allowed:
            return f"{part} takes {', '.join(sorted(allowed))}"
        resources = section.get("resources", {})
        if not isinstance(resources, dict) or set(resources) - _RESOURCES[part]:
            return f"{part}.resources takes {', '.join(sorted(_RESOURCES[part]))}"
        for key, value in resources.items():
            if not isinstance(value, str) or not _QUANTITY.match(value):
                return f"{part}.resources.{key} must be a Kubernetes quantity such as 512Mi"
    for part in ("router", "broker"):
        replicas = config.get(part, {}).get("minReplicas", 1)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or not (
                1 <= replicas <= MAX_MIN_REPLICAS):
            return f"{part}.minReplicas must be an integer from 1 to {MAX_MIN_REPLICAS}"
    storage_class = config.get("broker", {}).get("storageClassName", "")
    if not isinstance(storage_class, str):
        return "broker.storageClassName must be a string"
    return ""
