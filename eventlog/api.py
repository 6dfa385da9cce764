"""The config log as the REST API shows it: one event's body (password hashes redacted) and its
OpenAPI type."""
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers as s

from core.api.manifests import MAAS_API
from core.api.schemas import Described, list_of

from .events import EVENT_TYPES, public_payload


def event(e) -> dict:
    return {
        "position": e.position,
        "stream": str(e.stream_id),
        "sequence": e.sequence,
        "type": e.type,
        "schemaVersion": e.schema_version,
        "payload": public_payload(e.payload),
        "actor": e.actor,
        "requestId": e.request_id,
        "time": e.created_at.isoformat(),
    }


@extend_schema_field({"type": "object", "additionalProperties": True,
                      "description": "The event's fields (per type); password hashes are "
                                     "`<redacted>`."})
class Payload(s.DictField):
    pass


class ConfigEvent(Described):
    position = s.IntegerField(help_text="Global order; pass it as `after` to read on.")
    stream = s.UUIDField(help_text="The uid of the address space (or tenant, or the plans "
                                   "stream) it belongs to.")
    sequence = s.IntegerField(help_text="Per stream: 1, 2, 3, ...")
    type = s.CharField(help_text="One of: " + ", ".join(EVENT_TYPES) + " (more may come).")
    schemaVersion = s.IntegerField()
    payload = Payload()
    actor = s.CharField(help_text="Who: `user:<name>`, `token:<token>:<name>`, `system`, ...")
    requestId = s.CharField(allow_blank=True)
    time = s.DateTimeField()


ConfigEventList = list_of(ConfigEvent, "ConfigEventList", MAAS_API)
