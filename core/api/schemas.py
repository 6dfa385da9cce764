"""The OpenAPI pieces every body of the API shares: serializers that describe, never render.

The views render with plain functions (config_service/api/resources.py, tenants/api/bodies.py);
these say field by field what those return (and what a posted manifest may hold), so that
/api/schema/ types every body and a client can be generated from it. Why not serializers that
render too: a page of 100 addresses costs 0.5 ms of CPU by hand and 3.1 ms through DRF
serializers that render the same body (6x; `tests/bench/bench_render.py`), on a list request of
about 12 ms at 100,000 addresses (docs/scale.md). What keeps the description and the renderer
the same body is tests/config_service/test_openapi_schema.py: every answer it makes is checked
against its operation's schema, with no field the schema does not declare.
"""
from rest_framework import serializers as s


class Described(s.Serializer):
    # The base of the serializers below, which describe a body and never validate nor render
    # one. No docstring: drf-spectacular would give it to every body as its description.
    pass


def always(value: str) -> s.CharField:
    """`kind` or `apiVersion` of an answer: one value, typed as a string (see above)."""
    return s.CharField(help_text=f"Always `{value}`.")


# Errors --------------------------------------------------------------------------------------

class Error(Described):
    """The one error shape of the API (config_service/api/errors.py)."""

    status = s.IntegerField(help_text="The HTTP status again.")
    code = s.CharField(help_text="Machine-readable: invalid, not_found, conflict, "
                                 "quota_exceeded, permission_denied, not_authenticated, ...")
    message = s.CharField()
    detail = s.CharField(help_text="The same as message (DRF's name for it).")
    field = s.CharField(required=False, help_text="The bad input, e.g. `spec.plan`.")


def errors(*codes: int) -> dict:
    """Responses entries for the error statuses an operation answers with."""
    return {code: Error for code in codes}


# A read: 400 for a bad query parameter (or a control character in the URL), 404 for what you
# cannot see. A change: 403 for your role or a quota, 409 for a conflict; 413 for a body over
# the size limit.
READ = errors(400, 401, 404)
CHANGE = errors(400, 401, 403, 404, 409)
WRITE = {**CHANGE, **errors(413)}


class ObjectMeta(Described):
    name = s.CharField()
    namespace = s.CharField(help_text="The tenant's name.")
    resourceVersion = s.CharField(help_text="Changes on every change; send it back on a write "
                                            "(or as If-Match) to be refused with 409 if stale.")
    creationTimestamp = s.DateTimeField()


class ManifestMeta(Described):
    """Metadata of a posted manifest; other keys (labels, annotations, ...) are ignored."""

    name = s.CharField(required=False)
    resourceVersion = s.CharField(required=False, help_text="The version the change is based "
                                                            "on: a stale one is refused (409).")


class NamedManifestMeta(ManifestMeta):
    name = s.CharField()


class ListMeta(Described):
    totalItems = s.IntegerField()
    next = s.URLField(allow_null=True, help_text="The next page, or null.")
    previous = s.URLField(allow_null=True, help_text="The previous page, or null.")


def list_of(item: type[s.Serializer], kind: str, api_version: str) -> type[s.Serializer]:
    """The list envelope of `pagination.ListPagination`, with items of one kind."""
    fields = {
        "apiVersion": always(api_version),
        "kind": always(kind),
        "metadata": ListMeta(),
        "items": item(many=True),
        "__doc__": f"A page of {item.__name__} items (limit/offset).",
    }
    return type(kind, (Described,), fields)
