"""Address spaces of a tenant: list, create, read, replace or patch the plan, delete."""
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import manifests
from core.api.schemas import CHANGE, READ, WRITE
from core.errors import Invalid
from tenants.access import tenant_for
from tenants.roles import Action

from ... import services
from ...models import AddressSpace
from ...status import agent_states, space_status
from .. import resources, schemas
from ..merge_patch import patched_spec
from ..parsers import PARSERS
from .common import LIST_PARAMS, SpaceMixin, ctx_of, paged, phase_param, same_name


class AddressSpaceList(APIView):
    @extend_schema(parameters=LIST_PARAMS, responses={200: schemas.AddressSpaceList, **READ})
    def get(self, request, tenant):
        t = tenant_for(request.user, tenant, Action.READ)
        spaces = AddressSpace.objects.filter(tenant=t).select_related("tenant").order_by("name")
        if request.query_params.get("type"):
            spaces = spaces.filter(type=request.query_params["type"])
        phase = phase_param(request)
        states = agent_states(spaces.values_list("uid", flat=True))
        if phase:
            keep = [s.pk for s in spaces if space_status(s, states.get(s.uid, {})).phase == phase]
            spaces = spaces.filter(pk__in=keep)
        return paged(self, request, spaces,
                      lambda s: resources.address_space(s, states.get(s.uid, {})),
                      "AddressSpaceList", manifests.ENMASSE)

    @extend_schema(request=schemas.AddressSpaceManifest,
                   responses={201: schemas.AddressSpace, **WRITE},
                   summary="Create an address space (an EnMasse AddressSpace manifest)")
    def post(self, request, tenant):
        t = tenant_for(request.user, tenant, Action.MANAGE_SPACES)
        metadata, spec = manifests.read(request.data, "AddressSpace")
        extra = {k: v for k, v in spec.items() if k not in ("type", "plan")}
        space = services.create_address_space(
            ctx=ctx_of(request), tenant=t, name=metadata.get("name"), type=spec.get("type"),
            plan=spec.get("plan"), spec=extra,
        )
        return Response(resources.address_space(space, {}), status=status.HTTP_201_CREATED)


class AddressSpaceDetail(SpaceMixin, APIView):
    parser_classes = PARSERS

    @extend_schema(responses={200: schemas.AddressSpace, **READ})
    def get(self, request, tenant, space):
        s = self.space(request, tenant, space, Action.READ)
        return Response(resources.address_space(s, agent_states([s.uid]).get(s.uid, {})))

    @extend_schema(request=schemas.AddressSpaceUpdate,
                   responses={200: schemas.AddressSpace, **WRITE},
                   summary="Replace the spec of an address space: its plan (owner); keys left "
                           "out are gone")
    def put(self, request, tenant, space):
        s = self.space(request, tenant, space, Action.CHANGE_SPACE_PLAN)
        metadata, spec = manifests.read(request.data, "AddressSpace")
        return self._write(request, s, metadata, spec)

    @extend_schema(request=schemas.AddressSpaceUpdate,
                   responses={200: schemas.AddressSpace, **WRITE},
                   summary="Change the spec of an address space by a JSON merge patch (owner)")
    def patch(self, request, tenant, space):
        s = self.space(request, tenant, space, Action.CHANGE_SPACE_PLAN)
        metadata, _ = manifests.read(request.data, "AddressSpace")
        current = {**s.spec, "type": s.type, "plan": s.plan}
        return self._write(request, s, metadata, patched_spec(current, request.data))

    def _write(self, request, s, metadata, spec):
        same_name(metadata, s.name)
        if spec.get("type", s.type) != s.type:
            raise Invalid("spec.type cannot be changed", "spec.type")
        if "plan" not in spec:
            raise Invalid("spec.plan is required", "spec.plan")
        s = services.change_address_space_plan(
            ctx=ctx_of(request), space=s, plan=spec["plan"],
            spec={k: v for k, v in spec.items() if k not in ("type", "plan")},
            expected_version=manifests.expected_version(request, metadata),
        )
        return Response(resources.address_space(s, agent_states([s.uid]).get(s.uid, {})))

    @extend_schema(responses={202: schemas.AddressSpace, **CHANGE})
    def delete(self, request, tenant, space):
        s = self.space(request, tenant, space, Action.MANAGE_SPACES)
        services.delete_address_space(ctx=ctx_of(request), space=s,
                                      expected_version=manifests.expected_version(request, {}))
        s.refresh_from_db()
        return Response(resources.address_space(s, agent_states([s.uid]).get(s.uid, {})),
                        status=status.HTTP_202_ACCEPTED)
