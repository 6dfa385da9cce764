"""Operators' plans: everyone reads them, staff create, replace, patch (JSON merge patch) and
delete them, each through a service function recording an event of the plans stream. Address
space plans and address plans are the same views over two kinds (`plan_views`)."""
from collections.abc import Callable
from dataclasses import dataclass, field

from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import manifests
from core.api.schemas import CHANGE, READ, WRITE, errors
from tenants.models import AddressPlan, AddressSpacePlan

from ... import services
from .. import resources, schemas
from ..merge_patch import patched_spec
from ..parsers import PARSERS
from .common import ctx_of, paged, same_name

PLAN_WRITE = {**WRITE, **errors(403)}


@dataclass(frozen=True)
class PlanKind:
    kind: str  # AddressSpacePlan, AddressPlan
    noun: str  # in summaries: "address space plan"
    queryset: Callable[[], QuerySet]
    filters: dict[str, str]  # query parameter -> field it filters on
    render: Callable
    create: Callable
    replace: Callable
    remove: Callable
    body: type  # the OpenAPI types of the plan, its list, a posted manifest and an update
    list_body: type
    manifest: type
    update: type
    replace_effect: str  # what a new spec does, in the PUT summary
    delete_condition: str  # when it may be deleted, in the DELETE summary
    staff_only: tuple = field(default=("post", "put", "patch", "delete"))


def _operator(request) -> None:
    if not request.user.is_staff:
        raise PermissionDenied("Only operators (staff) create, change or delete plans.")


def plan_views(k: PlanKind) -> tuple[type[APIView], type[APIView]]:
    """The list view (GET, POST) and the detail view (GET, PUT, PATCH, DELETE) of a plan kind."""

    class PlanList(APIView):
        """POST on the list, PUT (replace), PATCH (JSON merge patch) and DELETE on a plan: staff
        only, each a service function recording an event of the plans stream."""

        staff_only = k.staff_only  # read by the isolation matrix

        @extend_schema(parameters=[OpenApiParameter(p, str) for p in k.filters],
                       responses={200: k.list_body, **errors(400, 401)})
        def get(self, request):
            plans = k.queryset()
            for param, lookup in k.filters.items():
                if request.query_params.get(param):
                    plans = plans.filter(**{lookup: request.query_params[param]})
            return paged(self, request, plans, k.render, f"{k.kind}List", manifests.ADMIN_API)

        @extend_schema(request=k.manifest, responses={201: k.body, **PLAN_WRITE},
                       summary=f"Create an {k.noun} (operators)")
        def post(self, request):
            _operator(request)
            metadata, spec = manifests.read(request.data, k.kind)
            plan = k.create(ctx=ctx_of(request), name=metadata.get("name"), spec=spec)
            return Response(k.render(plan), status=status.HTTP_201_CREATED)

    class PlanDetail(APIView):
        """POST on the list, PUT (replace), PATCH (JSON merge patch) and DELETE on a plan: staff
        only, each a service function recording an event of the plans stream."""

        parser_classes = PARSERS
        staff_only = k.staff_only

        @extend_schema(responses={200: k.body, **READ})
        def get(self, request, plan):
            return Response(k.render(get_object_or_404(k.queryset(), name=plan)))

        @extend_schema(request=k.update, responses={200: k.body, **PLAN_WRITE},
                       summary=f"Replace an {k.noun}'s spec (operators): {k.replace_effect}")
        def put(self, request, plan):
            return self._replace(request, plan, partial=False)

        @extend_schema(request=k.update, responses={200: k.body, **PLAN_WRITE},
                       summary=f"Change an {k.noun} by a JSON merge patch (operators)")
        def patch(self, request, plan):
            return self._replace(request, plan, partial=True)

        @extend_schema(responses={204: None, **CHANGE},
                       summary=f"Delete an {k.noun} {k.delete_condition} (operators)")
        def delete(self, request, plan):
            _operator(request)
            get_object_or_404(k.queryset(), name=plan)
            k.remove(ctx=ctx_of(request), name=plan,
                     expected_version=manifests.expected_version(request, {}))
            return Response(status=status.HTTP_204_NO_CONTENT)

        def _replace(self, request, name, partial: bool):
            _operator(request)
            metadata, spec = manifests.read(request.data, k.kind)
            same_name(metadata, name)
            if partial:
                current = k.render(get_object_or_404(k.queryset(), name=name))
                spec = patched_spec(current["spec"], request.data)
            plan = k.replace(ctx=ctx_of(request), name=name, spec=spec,
                             expected_version=manifests.expected_version(request, metadata))
            return Response(k.render(plan))

    PlanList.__name__ = PlanList.__qualname__ = f"{k.kind}List"
    PlanDetail.__name__ = PlanDetail.__qualname__ = f"{k.kind}Detail"
    return PlanList, PlanDetail


AddressSpacePlanList, AddressSpacePlanDetail = plan_views(PlanKind(
    kind="AddressSpacePlan", noun="address space plan",
    queryset=lambda: AddressSpacePlan.objects.prefetch_related("address_plans").order_by(
        "display_order", "name"),
    filters={"type": "address_space_type"},
    render=resources.address_space_plan, create=services.create_space_plan,
    replace=services.replace_space_plan, remove=services.delete_space_plan,
    body=schemas.AddressSpacePlan, list_body=schemas.AddressSpacePlanList,
    manifest=schemas.AddressSpacePlanManifest, update=schemas.AddressSpacePlanUpdate,
    replace_effect="new limits re-evaluate its address spaces",
    delete_condition="no address space uses"))

AddressPlanList, AddressPlanDetail = plan_views(PlanKind(
    kind="AddressPlan", noun="address plan",
    queryset=lambda: AddressPlan.objects.order_by("display_order", "name"),
    filters={"type": "address_type", "addressSpacePlan": "space_plans__name"},
    render=resources.address_plan, create=services.create_address_plan,
    replace=services.replace_address_plan, remove=services.delete_address_plan,
    body=schemas.AddressPlan, list_body=schemas.AddressPlanList,
    manifest=schemas.AddressPlanManifest, update=schemas.AddressPlanUpdate,
    replace_effect="new credits re-place every address of the plan",
    delete_condition="no address uses and no space plan offers"))
