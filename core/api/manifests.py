"""EnMasse-shaped manifests: the API versions, the metadata every rendered resource carries, and
the reading of posted manifests (one object, or a `<kind>List` for bulk creates)."""
from ..errors import Invalid

ENMASSE = "enmasse.io/v1beta1"
USER_API = "user.enmasse.io/v1beta1"
ADMIN_API = "admin.enmasse.io/v1beta2"
MAAS_API = "maas.io/v1"


def timestamp(value) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def metadata(name, namespace, version, created, **extra) -> dict:
    meta = {"name": name, "namespace": namespace, "resourceVersion": str(version),
            "creationTimestamp": timestamp(created)}
    meta.update(extra)
    return meta


def read(body, kind: str) -> tuple[dict, dict]:
    """(metadata, spec) of a posted manifest; `kind`, if given, must match."""
    if not isinstance(body, dict):
        raise Invalid(f"the body must be a {kind} object (JSON or YAML)", "body")
    given = body.get("kind")
    if given is not None and given != kind:
        raise Invalid(f"kind must be {kind}, not {given}", "kind")
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    if not isinstance(meta, dict):
        raise Invalid("must be an object", "metadata")
    if not isinstance(spec, dict):
        raise Invalid("must be an object", "spec")
    return meta, spec


def created_list(kind: str, api_version: str, items: list[dict]) -> dict:
    """The answer to a bulk POST: every item created, in the list envelope."""
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"totalItems": len(items), "next": None, "previous": None},
            "items": items}


def list_items(body, kind: str) -> list | None:
    """The items of a posted `<kind>List` (bulk create), or None if the body is one object."""
    if not isinstance(body, dict) or body.get("kind") != f"{kind}List":
        return None
    items = body.get("items")
    if not isinstance(items, list) or not items:
        raise Invalid(f"a {kind}List needs a non-empty list of {kind} items", "items")
    return items


def expected_version(request, meta: dict):
    """The resourceVersion a writer based its change on: metadata or If-Match, if any."""
    value = meta.get("resourceVersion") or request.headers.get("If-Match", "").strip('"')
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise Invalid("resourceVersion must be a number", "metadata.resourceVersion") from None
