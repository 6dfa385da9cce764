"""JSON merge patch (RFC 7386): what PATCH does to a resource's spec before it is written as a
whole, the same way as a PUT."""
from core.errors import Invalid


def merge_patch(target, patch):
    """`patch` applied to `target`: objects merge key by key, null removes a key, anything else
    (arrays included) replaces. Neither argument is changed."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def patched_spec(current: dict, body) -> dict:
    """The spec a PATCH body leads to from the current one (`spec` must be an object)."""
    spec = body.get("spec") if isinstance(body, dict) else None
    if spec is None:
        return dict(current)
    if not isinstance(spec, dict):
        raise Invalid("must be an object", "spec")
    return merge_patch(current, spec)
