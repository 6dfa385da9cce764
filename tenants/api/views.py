"""REST API of tenants themselves: list the tenants you are a member of, create one (you become
its owner), read one, delete one (owner), and its quota (members read it, operators set it).
Members, invitations and the audit trail are in tenants/identity/api.py; address spaces and what
is in them in config_service/api/."""
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import manifests
from core.api.pagination import paged
from core.api.schemas import CHANGE, READ, WRITE, errors
from core.context import of_request

from ..access import role_of, tenant_for, visible_tenants
from ..models import TenantQuota
from ..roles import Action
from ..services import create_tenant, delete_tenant, request_quota_evaluation, set_quota
from . import bodies, schemas


class TenantList(APIView):
    @extend_schema(responses={200: schemas.TenantList, **errors(400, 401)},
                   summary="Tenants you are a member of (staff: all)")
    def get(self, request):
        tenants = visible_tenants(request.user).order_by("slug")
        return paged(self, request, tenants,
                     lambda t: bodies.tenant(t, role_of(request.user, t)),
                     "TenantList", manifests.MAAS_API)

    @extend_schema(request=schemas.TenantManifest, responses={201: schemas.Tenant, **WRITE},
                   summary="Create a tenant; you become its owner")
    def post(self, request):
        metadata, spec = manifests.read(request.data, "Tenant")
        tenant = create_tenant(ctx=of_request(request), slug=metadata.get("name"),
                               owner=request.user, name=spec.get("displayName", ""))
        return Response(bodies.tenant(tenant, "owner"), status=status.HTTP_201_CREATED)


class TenantDetail(APIView):
    @extend_schema(responses={200: schemas.Tenant, **READ})
    def get(self, request, tenant):
        t = tenant_for(request.user, tenant, Action.READ)
        return Response(bodies.tenant(t, role_of(request.user, t)))

    @extend_schema(responses={202: schemas.Tenant, **CHANGE},
                   summary="Delete the tenant (owner): its address spaces are torn down, its "
                           "members lose access at once; the name is free once the spaces are gone")
    def delete(self, request, tenant):
        t = tenant_for(request.user, tenant, Action.DELETE_TENANT)
        spaces = delete_tenant(ctx=of_request(request), tenant=t)
        t.refresh_from_db()
        return Response(bodies.tenant(t, None, terminating_spaces=spaces),
                        status=status.HTTP_202_ACCEPTED)


class TenantQuotaDetail(APIView):
    @extend_schema(responses={200: schemas.TenantQuota, **READ},
                   summary="The tenant's limits and whether it is throttled (members)")
    def get(self, request, tenant):
        t = tenant_for(request.user, tenant, Action.READ)
        return Response(bodies.tenant_quota(_quota(t)))

    @extend_schema(request=schemas.TenantQuotaUpdate,
                   responses={200: schemas.TenantQuota, **WRITE},
                   summary="Set every limit (operators); usage is re-evaluated within seconds")
    def put(self, request, tenant):
        return self._set(request, tenant, partial=False)

    @extend_schema(request=schemas.TenantQuotaPatch,
                   responses={200: schemas.TenantQuota, **WRITE},
                   summary="Set some limits (operators); usage is re-evaluated within seconds")
    def patch(self, request, tenant):
        return self._set(request, tenant, partial=True)

    def _set(self, request, tenant, partial: bool):
        t = tenant_for(request.user, tenant, Action.SET_QUOTA)
        quota = set_quota(ctx=of_request(request), tenant=t,
                          **bodies.quota_spec(request.data, partial))
        return Response(bodies.tenant_quota(quota))


class TenantQuotaEvaluate(APIView):
    @extend_schema(request=None, responses={202: schemas.TenantQuota, **CHANGE},
                   summary="Re-evaluate today's usage so far against the quota now (operators): "
                           "throttles or releases the tenant within seconds")
    def post(self, request, tenant):
        t = tenant_for(request.user, tenant, Action.SET_QUOTA)
        request_quota_evaluation(t)
        return Response(bodies.tenant_quota(_quota(t)), status=status.HTTP_202_ACCEPTED)


def _quota(tenant) -> TenantQuota:
    quota, _ = TenantQuota.objects.select_related("tenant").get_or_create(tenant=tenant)
    return quota
