"""Client connections of a space: list (filtered by protocol, via, user, search), read one
with its links, close one (tenant admins and operators; audited)."""
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.manifests import MAAS_API
from core.api.schemas import errors
from core.errors import Invalid
from tenants.roles import Action

from ... import services
from ...readings import PROTOCOLS, VIA
from .. import resources, schemas
from .common import SpaceMixin, ctx_of, paged

FILTERS = [OpenApiParameter("limit", int), OpenApiParameter("offset", int),
           OpenApiParameter("protocol", str, enum=PROTOCOLS),
           OpenApiParameter("via", str, enum=VIA),
           OpenApiParameter("user", str, description="Only this messaging user's."),
           OpenApiParameter("search", str, description="In the host name, container id and "
                                                       "user.")]
LIVE = errors(400, 401, 404, 503)  # 503: the space's router or broker did not answer


class ConnectionList(SpaceMixin, APIView):
    @extend_schema(parameters=FILTERS, responses={200: schemas.ConnectionList, **LIVE},
                   summary="The space's client connections now (router, gateway or broker)")
    def get(self, request, tenant, space):
        s = self.space(request, tenant, space, Action.READ)
        found = services.list_connections(s)
        q = request.query_params
        for name, allowed in (("protocol", PROTOCOLS), ("via", VIA)):
            if q.get(name) and q[name] not in allowed:
                raise Invalid(f"{name} must be one of {', '.join(allowed)}", name)
        for name, key in (("protocol", "protocol"), ("via", "via"), ("user", "principal")):
            if q.get(name):
                found = [c for c in found if getattr(c, key) == q[name]]
        if q.get("search"):
            term = q["search"].lower()
            found = [c for c in found
                     if term in c.hostname.lower() or term in c.container_id.lower()
                     or term in c.principal.lower()]
        return paged(self, request, found, lambda c: resources.connection(s, c),
                     "ConnectionList", MAAS_API)


class ConnectionDetail(SpaceMixin, APIView):
    @extend_schema(responses={200: schemas.ConnectionDetail, **LIVE},
                   summary="One client connection with its links")
    def get(self, request, tenant, space, connection):
        s = self.space(request, tenant, space, Action.READ)
        return Response(resources.connection(s, services.find_connection(s, connection),
                                             links=True))

    @extend_schema(responses={204: None, **errors(400, 401, 403, 404, 503)},
                   summary="Close a client connection (it sees a forced close and may "
                           "reconnect); recorded in the tenant's audit trail")
    def delete(self, request, tenant, space, connection):
        s = self.space(request, tenant, space, Action.CLOSE_CONNECTIONS)
        services.close_connection(ctx=ctx_of(request), space=s, connection_id=connection)
        return Response(status=status.HTTP_204_NO_CONTENT)
