"""REST API views: address spaces, addresses, messaging users, plans and events.

Every view resolves its tenant through `tenants.access.tenant_for`, so an outsider gets 404,
and every write calls one service function. PUT replaces a spec, PATCH merges a JSON merge
patch (RFC 7386) into it first; plans are everyone's to read and operators' to write.
"""
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from maas.core.context import Context
from maas.core.errors import Invalid, ServiceError
from maas.core.pagination import ListPagination
from tenants.access import check_role, tenant_for
from tenants.models import AddressPlan, AddressSpacePlan
from tenants.roles import Action

from .. import services, statements
from ..events import public_payload
from ..models import Address, AddressSpace, ConfigEvent, MessagingUser
from ..status import PHASES, agent_states, phase_filter, space_status
from . import resources, schemas
from .merge_patch import patched_spec
from .parsers import PARSERS
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


def _same_name(metadata: dict, name: str) -> None:
    if metadata.get("name", name) != name:
        raise Invalid("metadata.name does not match the URL", "metadata.name")


def _created(body, kind: str, api_version: str, create, render, create_many=None):
    """201 with the object of a POSTed manifest, or with every item of a POSTed `<kind>List`,
    created in one transaction: one bad item is refused naming it (`items[i].<field>`) and
    nothing is created. `create_many`, if given, takes the whole list (a batch service
    function that names the bad item itself)."""
    items = resources.list_items(body, kind)
    if items is None:
        return Response(render([create(body)])[0], status=status.HTTP_201_CREATED)
    if create_many is not None:
        created = create_many(items)
        return Response(resources.created_list(f"{kind}List", api_version, render(created)),
                        status=status.HTTP_201_CREATED)
    created = []
    with transaction.atomic():
        for i, item in enumerate(items):
            try:
                created.append(create(item))
            except ServiceError as error:
                raise error.of_item(i) from None
    return Response(resources.created_list(f"{kind}List", api_version, render(created)),
                    status=status.HTTP_201_CREATED)


LIST_PARAMS = [
    OpenApiParameter("limit", int), OpenApiParameter("offset", int),
    OpenApiParameter("type", str), OpenApiParameter("phase", str, enum=PHASES),
]


class SpaceMixin:
    def space(self, request, tenant: str, name: str, action: Action) -> AddressSpace:
        user = request.user
        if user.is_authenticated and not user.is_staff:
            # The space, its tenant and the member's role in one query (every call on a space
            # starts here); a miss goes the long way below, which says what is missing.
            found = statements.member_space(user.pk, tenant, name)
            if found is not None:
                check_role(found.member_role, tenant, action)
                return found
        t = tenant_for(user, tenant, action)
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
        metadata, spec = resources.read(request.data, "AddressSpace")
        return self._write(request, s, metadata, spec)

    @extend_schema(request=schemas.AddressSpaceUpdate,
                   responses={200: schemas.AddressSpace, **WRITE},
                   summary="Change the spec of an address space by a JSON merge patch (owner)")
    def patch(self, request, tenant, space):
        s = self.space(request, tenant, space, Action.CHANGE_SPACE_PLAN)
        metadata, _ = resources.read(request.data, "AddressSpace")
        current = {**s.spec, "type": s.type, "plan": s.plan}
        return self._write(request, s, metadata, patched_spec(current, request.data))

    def _write(self, request, s, metadata, spec):
        _same_name(metadata, s.name)
        if spec.get("type", s.type) != s.type:
            raise Invalid("spec.type cannot be changed", "spec.type")
        if "plan" not in spec:
            raise Invalid("spec.plan is required", "spec.plan")
        s = services.change_address_space_plan(
            ctx=_ctx(request), space=s, plan=spec["plan"],
            spec={k: v for k, v in spec.items() if k not in ("type", "plan")},
            expected_version=resources.expected_version(request, metadata),
        )
        return Response(resources.address_space(s, agent_states([s.uid]).get(s.uid, {})))

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

    @extend_schema(request=schemas.AddressManifestOrList,
                   responses={201: schemas.AddressOrList, **WRITE},
                   summary="Create an address (an EnMasse Address manifest), or every item of "
                           "an AddressList or none")
    def post(self, request, tenant, space):
        s = self.space(request, tenant, space, Action.MANAGE_ADDRESSES)
        ctx = _ctx(request)

        def arguments(body):
            metadata, spec = resources.read(body, "Address")
            return {"name": metadata.get("name"), "address": spec.get("address"),
                    "type": spec.get("type"), "plan": spec.get("plan"),
                    "topic": spec.get("topic"), "deadletter": spec.get("deadletter"),
                    "expiry": spec.get("expiry"), "spec": spec}

        def create(body):
            return services.create_address(ctx=ctx, space=s, **arguments(body))

        def create_many(items):
            listed = []
            for i, body in enumerate(items):
                try:
                    listed.append(arguments(body))
                except ServiceError as error:
                    raise error.of_item(i) from None
            return services.create_addresses(ctx=ctx, space=s, items=listed)

        def render(addresses):
            states = agent_states([s.uid]).get(s.uid, {})
            return [resources.address(s, a, states) for a in addresses]

        return _created(request.data, "Address", resources.ENMASSE, create, render,
                        create_many)


class AddressDetail(SpaceMixin, APIView):
    parser_classes = PARSERS

    def _get(self, s, name):
        return get_object_or_404(Address, space=s, name=name)

    @extend_schema(responses={200: schemas.Address, **READ})
    def get(self, request, tenant, space, address):
        s = self.space(request, tenant, space, Action.READ)
        return Response(resources.address(s, self._get(s, address),
                                          agent_states([s.uid]).get(s.uid, {})))

    @extend_schema(request=schemas.AddressUpdate, responses={200: schemas.Address, **WRITE},
                   summary="Replace the spec of an address: plan, deadletter, expiry, TTL and "
                           "redelivery; optional fields left out return to their defaults")
    def put(self, request, tenant, space, address):
        s = self.space(request, tenant, space, Action.MANAGE_ADDRESSES)
        self._get(s, address)
        metadata, spec = resources.read(request.data, "Address")
        return self._write(request, s, address, metadata, spec)

    @extend_schema(request=schemas.AddressUpdate, responses={200: schemas.Address, **WRITE},
                   summary="Change the spec of an address by a JSON merge patch")
    def patch(self, request, tenant, space, address):
        s = self.space(request, tenant, space, Action.MANAGE_ADDRESSES)
        current = self._get(s, address)
        metadata, _ = resources.read(request.data, "Address")
        spec = patched_spec(resources.address(s, current, {})["spec"], request.data)
        return self._write(request, s, address, metadata, spec)

    def _write(self, request, s, address, metadata, spec):
        _same_name(metadata, address)
        if "plan" not in spec:
            raise Invalid("spec.plan is required", "spec.plan")
        addr = services.update_address(
            ctx=_ctx(request), space=s, name=address, plan=spec["plan"],
            deadletter=spec.get("deadletter"), expiry=spec.get("expiry"), spec=spec,
            address=spec.get("address"), type=spec.get("type"), topic=spec.get("topic"),
            expected_version=resources.expected_version(request, metadata),
        )
        return Response(resources.address(s, addr, agent_states([s.uid]).get(s.uid, {})))

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

    @extend_schema(request=schemas.MessagingUserManifestOrList,
                   responses={201: schemas.MessagingUserOrList, **WRITE},
                   summary="Create a messaging user (an EnMasse MessagingUser manifest), or "
                           "every item of a MessagingUserList or none")
    def post(self, request, tenant, space):
        s = self.space(request, tenant, space, Action.MANAGE_USERS)
        ctx = _ctx(request)

        def create(body):
            metadata, spec = resources.read(body, "MessagingUser")
            return services.create_messaging_user(
                ctx=ctx, space=s, name=metadata.get("name"), username=spec.get("username"),
                authentication=spec.get("authentication"),
                authorization=spec.get("authorization"),
            )

        return _created(request.data, "MessagingUser", resources.USER_API, create,
                        lambda users: [resources.messaging_user(s, u, {}) for u in users])


class MessagingUserDetail(SpaceMixin, APIView):
    parser_classes = PARSERS

    def _get(self, s, name):
        return get_object_or_404(MessagingUser, space=s, name=name)

    @extend_schema(responses={200: schemas.MessagingUser, **READ})
    def get(self, request, tenant, space, user):
        s = self.space(request, tenant, space, Action.READ)
        return Response(resources.messaging_user(s, self._get(s, user),
                                                 agent_states([s.uid]).get(s.uid, {})))

    @extend_schema(request=schemas.MessagingUserUpdate,
                   responses={200: schemas.MessagingUser, **WRITE},
                   summary="Replace the spec of a user: rules left out are gone; the password "
                           "(write-only) changes only when given")
    def put(self, request, tenant, space, user):
        s = self.space(request, tenant, space, Action.MANAGE_USERS)
        self._get(s, user)
        metadata, spec = resources.read(request.data, "MessagingUser")
        return self._write(request, s, user, metadata, spec)

    @extend_schema(request=schemas.MessagingUserUpdate,
                   responses={200: schemas.MessagingUser, **WRITE},
                   summary="Change the spec of a user by a JSON merge patch")
    def patch(self, request, tenant, space, user):
        s = self.space(request, tenant, space, Action.MANAGE_USERS)
        current = self._get(s, user)
        metadata, _ = resources.read(request.data, "MessagingUser")
        spec = patched_spec(resources.messaging_user(s, current, {})["spec"], request.data)
        return self._write(request, s, user, metadata, spec)

    def _write(self, request, s, user, metadata, spec):
        _same_name(metadata, user)
        authentication = spec.get("authentication")
        if isinstance(authentication, dict) and "password" not in authentication:
            authentication = None  # the password is write-only: not given, it stays
        updated = services.update_messaging_user(
            ctx=_ctx(request), space=s, name=user, username=spec.get("username"),
            authentication=authentication, authorization=spec.get("authorization") or [],
            expected_version=resources.expected_version(request, metadata),
        )
        return Response(resources.messaging_user(s, updated,
                                                 agent_states([s.uid]).get(s.uid, {})))

    @extend_schema(responses={204: None, **CHANGE})
    def delete(self, request, tenant, space, user):
        s = self.space(request, tenant, space, Action.MANAGE_USERS)
        self._get(s, user)
        services.delete_messaging_user(ctx=_ctx(request), space=s, name=user,
                                       expected_version=resources.expected_version(request, {}))
        return Response(status=status.HTTP_204_NO_CONTENT)


def _operator(request) -> None:
    if not request.user.is_staff:
        raise PermissionDenied("Only operators (staff) create, change or delete plans.")


class PlanWrites:
    """POST on the list, PUT (replace), PATCH (JSON merge patch) and DELETE on a plan: staff
    only, each a service function recording an event of the plans stream."""

    staff_only = ("post", "put", "patch", "delete")  # read by the isolation matrix
    kind: str
    model: type
    render: staticmethod
    spec_of: staticmethod
    create: staticmethod
    replace: staticmethod
    remove: staticmethod

    def _create(self, request):
        _operator(request)
        metadata, spec = resources.read(request.data, self.kind)
        plan = self.create(ctx=_ctx(request), name=metadata.get("name"), spec=spec)
        return Response(self.render(plan), status=status.HTTP_201_CREATED)

    def _replace(self, request, name, partial: bool):
        _operator(request)
        metadata, spec = resources.read(request.data, self.kind)
        _same_name(metadata, name)
        if partial:
            spec = patched_spec(self.render(get_object_or_404(self.model, name=name))["spec"],
                                request.data)
        plan = self.replace(ctx=_ctx(request), name=name, spec=spec,
                            expected_version=resources.expected_version(request, metadata))
        return Response(self.render(plan))

    def _delete(self, request, name):
        _operator(request)
        get_object_or_404(self.model, name=name)
        self.remove(ctx=_ctx(request), name=name,
                    expected_version=resources.expected_version(request, {}))
        return Response(status=status.HTTP_204_NO_CONTENT)


PLAN_WRITE = {**WRITE, **schemas.errors(403)}


class SpacePlanWrites(PlanWrites):
    kind, model = "AddressSpacePlan", AddressSpacePlan
    render = staticmethod(resources.address_space_plan)
    create = staticmethod(services.create_space_plan)
    replace = staticmethod(services.replace_space_plan)
    remove = staticmethod(services.delete_space_plan)


class AddressPlanWrites(PlanWrites):
    kind, model = "AddressPlan", AddressPlan
    render = staticmethod(resources.address_plan)
    create = staticmethod(services.create_address_plan)
    replace = staticmethod(services.replace_address_plan)
    remove = staticmethod(services.delete_address_plan)


class AddressSpacePlanList(SpacePlanWrites, APIView):
    @extend_schema(parameters=[OpenApiParameter("type", str)],
                   responses={200: schemas.AddressSpacePlanList, **schemas.errors(400, 401)})
    def get(self, request):
        plans = AddressSpacePlan.objects.prefetch_related("address_plans").order_by(
            "display_order", "name")
        if request.query_params.get("type"):
            plans = plans.filter(address_space_type=request.query_params["type"])
        return _paged(self, request, plans, resources.address_space_plan,
                      "AddressSpacePlanList", resources.ADMIN_API)

    @extend_schema(request=schemas.AddressSpacePlanManifest,
                   responses={201: schemas.AddressSpacePlan, **PLAN_WRITE},
                   summary="Create an address space plan (operators)")
    def post(self, request):
        return self._create(request)


class AddressSpacePlanDetail(SpacePlanWrites, APIView):
    parser_classes = PARSERS

    @extend_schema(responses={200: schemas.AddressSpacePlan, **READ})
    def get(self, request, plan):
        return Response(resources.address_space_plan(get_object_or_404(AddressSpacePlan,
                                                                       name=plan)))

    @extend_schema(request=schemas.AddressSpacePlanUpdate,
                   responses={200: schemas.AddressSpacePlan, **PLAN_WRITE},
                   summary="Replace an address space plan's spec (operators): new limits "
                           "re-evaluate its address spaces")
    def put(self, request, plan):
        return self._replace(request, plan, partial=False)

    @extend_schema(request=schemas.AddressSpacePlanUpdate,
                   responses={200: schemas.AddressSpacePlan, **PLAN_WRITE},
                   summary="Change an address space plan by a JSON merge patch (operators)")
    def patch(self, request, plan):
        return self._replace(request, plan, partial=True)

    @extend_schema(responses={204: None, **CHANGE},
                   summary="Delete an address space plan no address space uses (operators)")
    def delete(self, request, plan):
        return self._delete(request, plan)


class AddressPlanList(AddressPlanWrites, APIView):
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

    @extend_schema(request=schemas.AddressPlanManifest,
                   responses={201: schemas.AddressPlan, **PLAN_WRITE},
                   summary="Create an address plan (operators)")
    def post(self, request):
        return self._create(request)


class AddressPlanDetail(AddressPlanWrites, APIView):
    parser_classes = PARSERS

    @extend_schema(responses={200: schemas.AddressPlan, **READ})
    def get(self, request, plan):
        return Response(resources.address_plan(get_object_or_404(AddressPlan, name=plan)))

    @extend_schema(request=schemas.AddressPlanUpdate,
                   responses={200: schemas.AddressPlan, **PLAN_WRITE},
                   summary="Replace an address plan's spec (operators): new credits re-place "
                           "every address of the plan")
    def put(self, request, plan):
        return self._replace(request, plan, partial=False)

    @extend_schema(request=schemas.AddressPlanUpdate,
                   responses={200: schemas.AddressPlan, **PLAN_WRITE},
                   summary="Change an address plan by a JSON merge patch (operators)")
    def patch(self, request, plan):
        return self._replace(request, plan, partial=True)

    @extend_schema(responses={204: None, **CHANGE},
                   summary="Delete an address plan no address uses and no space plan offers "
                           "(operators)")
    def delete(self, request, plan):
        return self._delete(request, plan)


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


