"""A tenant's own config log, oldest first (read-only)."""
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.views import APIView

from core.api import manifests
from core.api.schemas import READ
from core.errors import Invalid
from eventlog.api import ConfigEventList, event
from eventlog.models import ConfigEvent
from tenants.access import tenant_for
from tenants.roles import Action

from ...models import AddressSpace
from .common import paged


class EventList(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("after", OpenApiTypes.INT, description="position"),
                    OpenApiParameter("type", str), OpenApiParameter("space", str),
                    OpenApiParameter("limit", int), OpenApiParameter("offset", int)],
        responses={200: ConfigEventList, **READ},
        summary="The tenant's own config log, oldest first (read-only)",
    )
    def get(self, request, tenant):
        t = tenant_for(request.user, tenant, Action.READ)
        events = ConfigEvent.objects.filter(tenant=t).order_by("position")
        if request.query_params.get("after"):
            try:
                events = events.filter(position__gt=int(request.query_params["after"]))
            except ValueError:
                raise Invalid("after must be an event position", "after") from None
        if request.query_params.get("type"):
            events = events.filter(type=request.query_params["type"])
        if request.query_params.get("space"):
            uids = AddressSpace.objects.filter(tenant=t, name=request.query_params["space"])
            events = events.filter(stream_id__in=uids.values("uid"))
        return paged(self, request, events, event,
                      "ConfigEventList", manifests.MAAS_API)
