"""REST API views: address spaces, addresses, messaging users, plans and events.

Every view resolves its tenant through `tenants.access.tenant_for`, so an outsider gets 404,
and every write calls one service function.
"""
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from maas.core.context import Context
from maas.core.errors import Invalid
from maas.core.pagination import ListPagination
from tenants.access import tenant_for
from tenants.models import AddressPlan, AddressSpacePlan
from tenants.roles import Action

from .. import services, validation
from ..events import public_payload
from ..models import Address, AddressSpace, ConfigEvent, MessagingUser
from ..status import PHASES, agent_states, phase_filter, space_status
from . import resources, schemas
from .schemas import CHANGE, READ, WRITE


def _ctx(request) -> Context:
    actor = getattr(request, "auth_actor", None) or f"user:{request.user.get_username()}"
    return Context(actor=actor, request_id=getattr(request, "request_id", ""))


def _paged(view, request, queryset, render, kind: str, api_version: str):
    paginator = ListPagination()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response([render(o) for o in page], kind, api_version)


def _phase_param(request) -> str | None:
    phase = request.query_params.get("phase")
    if phase and phase not in PHASES:
        raise Invalid(f"phase must be one of {', '.join(PHASES)}", "phase")
    return phase


LIST_PARAMS = [
    OpenApiParameter("limit", int), OpenApiParameter("offset", int),
    OpenApiParameter("type", str), OpenApiParameter("phase", str, enum=PHASES),
]


class SpaceMixin:
    def space(self, request, tenant: str, name: str, action: Action) -> AddressSpace:
        t = tenant_for(request.user, tenant, action)
        return get_object_or_404(AddressSpace.objects.select_related("tenant"),
                                 tenant=t, name=name)


class AddressSpaceList(APIView):
    @extend_schema(parameters=LIST_PARAMS, responses={200: schemas.AddressSpaceList, **READ})
    def get(self, request, tenant):
        t = tenant_for(request.user, tenant, Action.READ)
        spaces = AddressSpace.objects.filter(tenant=t).select_related("tenant").order_by("name")
        if request.query_params.get("type"):
            spaces = spaces.filter(type=request.query_params["type"])
        phase = _phase_param(request)
        states = agent_states(spaces.values_list("uid", flat=True))
        if phase:
            keep = [s.pk for s in spaces if space_status(s, states.get(s.uid, {})).phase == phase]
            spaces = spaces.filter(pk__in=keep)
        return _paged(self, request, spaces,
                      lambda s: resources.address_space(s, states.get(s.uid, {})),
                      "AddressSpaceList", resources.ENMASSE)

    @extend_schema(request=schemas.AddressSpaceManifest,
                   responses={201: schemas.AddressSpace, **WRITE},
                   summary="Create an address space (an EnMasse AddressSpace manifest)")
    def post(self, request, tenant):
        t = tenant_for(request.user, tenant, Action.MANAGE_SPACES)
        metadata, spec = resources.read(request.data, "AddressSpace")
        extra = {k: v for k, v in spec.items() if k not in ("type", "plan")}
        space = services.create_address_space(
            ctx=_ctx(request), tenant=t, name=metadata.get("name"), type=spec.get("type"),
            plan=spec.get("plan"), spec=extra,
        )
        return Response(resources.address_space(space, {}), status=status.HTTP_201_CREATED)


class AddressSpaceDetail(SpaceMixin, APIView):
    @extend_schema(responses={200: schemas.AddressSpace, **READ})
    def get(self, request, tenant, space):
        s = self.space(request, tenant, space, Action.READ)
        return Response(resources.address_space(s, agent_states([s.uid]).get(s.uid, {})))

    @extend_schema(request=schemas.AddressSpaceUpdate,
                   responses={200: schemas.AddressSpace, **WRITE},
                   summary="Change the plan of an address space (owner)")
    def put(self, request, tenant, space):
        s = self.space(request, tenant, space, Action.CHANGE_SPACE_PLAN)
        metadata, spec = resources.read(request.data, "AddressSpace")
        validation.space_spec(spec)
        if spec.get("type", s.type) != s.type:
            raise Invalid("spec.type cannot be changed", "spec.type")
        s = services.change_address_space_plan(
            ctx=_ctx(request), space=s, plan=spec.get("plan", s.plan),
            expected_version=resources.expected_version(request, metadata),
        )
        return Response(resources.address_space(s, agent_states([s.uid]).get(s.uid, {})))

    patch = put

    @extend_schema(responses={202: schemas.AddressSpace, **CHANGE})
    def delete(self, request, tenant, space):
        s = self.space(request, tenant, space, Action.MANAGE_SPACES)
        services.delete_address_space(ctx=_ctx(request), space=s,
                                      expected_version=resources.expected_version(request, {}))
        s.refresh_from_db()
        return Response(resources.address_space(s, agent_states([s.uid]).get(s.uid, {})),
                        status=status.HTTP_202_ACCEPTED)


class AddressList(SpaceMixin, APIView):
    @extend_schema(parameters=LIST_PARAMS + [OpenApiParameter("search", str)],
                   responses={200: schemas.AddressList, **READ})
    def get(self, request, tenant, space):
        s = self.space(request, tenant, space, Action.READ)
        states = agent_states([s.uid]).get(s.uid, {})
        addresses = Address.objects.filter(space=s).order_by("name")
        if request.query_params.get("type"):
            addresses = addresses.filter(type=request.query_params["type"])
        if request.query_params.get("search"):
            addresses = addresses.filter(address__icontains=request.query_params["search"])
        phase = _phase_param(request)
        if phase:
            addresses = addresses.filter(phase_filter(s, phase, states))
        return _paged(self, request, addresses, lambda a: resources.address(s, a, states),
                      "AddressList", resources.ENMASSE)

    @extend_schema(request=schemas.AddressManifest, responses={201: schemas.Address, **WRITE},
                   summary="Create an address (an EnMasse Address manifest)")
    def post(self, request, tenant, space):
        s = self.space(request, tenant, space, Action.MANAGE_ADDRESSES)
        metadata, spec = resources.read(request.data, "Address")
        addr = services.create_address(
            ctx=_ctx(request), space=s, name=metadata.get("name"), address=spec.get("address"),
            type=spec.get("type"), plan=spec.get("plan"), topic=spec.get("topic"),
            deadletter=spec.get("deadletter"), expiry=spec.get("expiry"), spec=spec,
        )
        return Response(resources.address(s, addr, agent_states([s.uid]).get(s.uid, {})),
                        status=status.HTTP_201_CREATED)


class AddressDetail(SpaceMixin, APIView):
    def _get(self, s, name):
        return get_object_or_404(Address, space=s, name=name)

    @extend_schema(responses={200: schemas.Address, **READ})
    def get(self, request, tenant, space, address):
        s = self.space(request, tenant, space, Action.READ)
        return Response(resources.address(s, self._get(s, address),
                                          agent_states([s.uid]).get(s.uid, {})))

    @extend_schema(request=schemas.AddressUpdate, responses={200: schemas.Address, **WRITE},
                   summary="Change plan, deadletter, expiry, TTL or redelivery of an address")
    def put(self, request, tenant, space, address):
        s = self.space(request, tenant, space, Action.MANAGE_ADDRESSES)
        current = self._get(s, address)
        metadata, spec = resources.read(request.data, "Address")
        if metadata.get("name", address) != address:
            raise Invalid("metadata.name does not match the URL", "metadata.name")
        partial = request.method == "PATCH"

        def field(key):
            return spec.get(key, getattr(current, key) or None) if partial else spec.get(key)

        addr = services.update_address(
            ctx=_ctx(request), space=s, name=address, plan=spec.get("plan"),
            deadletter=field("deadletter"), expiry=field("expiry"),
            spec={**(current.spec if partial else {}), **spec},
            address=spec.get("address"), type=spec.get("type"), topic=spec.get("topic"),
            expected_version=resources.expected_version(request, metadata),
        )
        return Response(resources.address(s, addr, agent_states([s.uid]).get(s.uid, {})))

    patch = put

    @extend_schema(responses={204: None, **CHANGE})
    def delete(self, request, tenant, space, address):
        s = self.space(request, tenant, space, Action.MANAGE_ADDRESSES)
        self._get(s, address)
        services.delete_address(ctx=_ctx(request), space=s, name=address,
                                expected_version=resources.expected_version(request, {}))
        return Response(status=status.HTTP_204_NO_CONTENT)


class AddressPurge(SpaceMixin, APIView):
    @extend_schema(request=None, responses={202: schemas.Address, **CHANGE},
                   summary="Drop every stored message of a queue, subscription or deadletter "
                           "address (carried out by the storage agent, once)")
    def post(self, request, tenant, space, address):
        s = self.space(request, tenant, space, Action.MANAGE_ADDRESSES)
        get_object_or_404(Address, space=s, name=address)
        addr = services.purge_address(ctx=_ctx(request), space=s, name=address)
        return Response(resources.address(s, addr, agent_states([s.uid]).get(s.uid, {})),
                        status=status.HTTP_202_ACCEPTED)


class MessagingUserList(SpaceMixin, APIView):
    @extend_schema(parameters=LIST_PARAMS[:2], responses={200: schemas.MessagingUserList, **READ})
    def get(self, request, tenant, space):
        s = self.space(request, tenant, space, Action.READ)
        states = agent_states([s.uid]).get(s.uid, {})
        users = MessagingUser.objects.filter(space=s).order_by("username")
        return _paged(self, request, users, lambda u: resources.messaging_user(s, u, states),
                      "MessagingUserList", resources.USER_API)

    @extend_schema(request=schemas.MessagingUserManifest,
                   responses={201: schemas.MessagingUser, **WRITE},
                   summary="Create a messaging user (an EnMasse MessagingUser manifest)")
    def post(self, request, tenant, space):
        s = self.space(request, tenant, space, Action.MANAGE_USERS)
        metadata, spec = resources.read(request.data, "MessagingUser")
        user = services.create_messaging_user(
            ctx=_ctx(request), space=s, name=metadata.get("name"), username=spec.get("username"),
            authentication=spec.get("authentication"), authorization=spec.get("authorization"),
        )
        return Response(resources.messaging_user(s, user, {}), status=status.HTTP_201_CREATED)


class MessagingUserDetail(SpaceMixin, APIView):
    def _get(self, s, name):
        return get_object_or_404(MessagingUser, space=s, name=name)

    @extend_schema(responses={200: schemas.MessagingUser, **READ})
    def get(self, request, tenant, space, user):
        s = self.space(request, tenant, space, Action.READ)
        return Response(resources.messaging_user(s, self._get(s, user),
                                                 agent_states([s.uid]).get(s.uid, {})))

    @extend_schema(request=schemas.MessagingUserUpdate,
                   responses={200: schemas.MessagingUser, **WRITE},
                   summary="Change the password or the authorization rules of a user")
    def put(self, request, tenant, space, user):
        s = self.space(request, tenant, space, Action.MANAGE_USERS)
        self._get(s, user)
        metadata, spec = resources.read(request.data, "MessagingUser")
        updated = services.update_messaging_user(
            ctx=_ctx(request), space=s, name=user, username=spec.get("username"),
            authentication=spec.get("authentication"), authorization=spec.get("authorization"),
            expected_version=resources.expected_version(request, metadata),
        )
        return Response(resources.messaging_user(s, updated,
                                                 agent_states([s.uid]).get(s.uid, {})))

    patch = put

    @extend_schema(responses={204: None, **CHANGE})
    def delete(self, request, tenant, space, user):
        s = self.space(request, tenant, space, Action.MANAGE_USERS)
        self._get(s, user)
        services.delete_messaging_user(ctx=_ctx(request), space=s, name=user,
                                       expected_version=resources.expected_version(request, {}))
        return Response(status=status.HTTP_204_NO_CONTENT)


class AddressSpacePlanList(APIView):
    @extend_schema(parameters=[OpenApiParameter("type", str)],
                   responses={200: schemas.AddressSpacePlanList, **schemas.errors(400, 401)})
    def get(self, request):
        plans = AddressSpacePlan.objects.prefetch_related("address_plans").order_by(
            "display_order", "name")
        if request.query_params.get("type"):
            plans = plans.filter(address_space_type=request.query_params["type"])
        return _paged(self, request, plans, resources.address_space_plan,
                      "AddressSpacePlanList", resources.ADMIN_API)


class AddressSpacePlanDetail(APIView):
    @extend_schema(responses={200: schemas.AddressSpacePlan, **READ})
    def get(self, request, plan):
        return Response(resources.address_space_plan(get_object_or_404(AddressSpacePlan,
                                                                       name=plan)))


class AddressPlanList(APIView):
    @extend_schema(parameters=[OpenApiParameter("type", str),
                               OpenApiParameter("addressSpacePlan", str)],
                   responses={200: schemas.AddressPlanList, **schemas.errors(400, 401)})
    def get(self, request):
        plans = AddressPlan.objects.order_by("display_order", "name")
        if request.query_params.get("type"):
            plans = plans.filter(address_type=request.query_params["type"])
        if request.query_params.get("addressSpacePlan"):
            plans = plans.filter(space_plans__name=request.query_params["addressSpacePlan"])
        return _paged(self, request, plans, resources.address_plan, "AddressPlanList",
                      resources.ADMIN_API)


class AddressPlanDetail(APIView):
    @extend_schema(responses={200: schemas.AddressPlan, **READ})
    def get(self, request, plan):
        return Response(resources.address_plan(get_object_or_404(AddressPlan, name=plan)))


class EventList(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("after", OpenApiTypes.INT, description="position"),
                    OpenApiParameter("type", str), OpenApiParameter("space", str),
                    OpenApiParameter("limit", int), OpenApiParameter("offset", int)],
        responses={200: schemas.ConfigEventList, **READ},
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
        return _paged(self, request, events, lambda e: resources.event(e, public_payload),
                      "ConfigEventList", resources.MAAS_API)


