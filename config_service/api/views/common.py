"""What the API's views share: who acts, paging, the phase filter, bulk creates (one object
or every item of a `<kind>List`), and the space of a URL resolved for the member (404 for
outsiders)."""
from django.db import transaction
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter
from rest_framework import status
from rest_framework.response import Response

from core.api import manifests
from core.api.pagination import ListPagination
from core.context import Context
from core.errors import Invalid, ServiceError
from tenants.access import check_role, tenant_for
from tenants.roles import Action

from ... import statements
from ...models import AddressSpace
from ...status import PHASES

# LIST_PARAMS, SpaceMixin, created, ctx_of, paged, phase_param, same_name


def ctx_of(request) -> Context:
    actor = getattr(request, "auth_actor", None) or f"user:{request.user.get_username()}"
    return Context(actor=actor, request_id=getattr(request, "request_id", ""))


def paged(view, request, queryset, render, kind: str, api_version: str):
    paginator = ListPagination()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response([render(o) for o in page], kind, api_version)


def phase_param(request) -> str | None:
    phase = request.query_params.get("phase")
    if phase and phase not in PHASES:
        raise Invalid(f"phase must be one of {', '.join(PHASES)}", "phase")
    return phase


def same_name(metadata: dict, name: str) -> None:
    if metadata.get("name", name) != name:
        raise Invalid("metadata.name does not match the URL", "metadata.name")


def created(body, kind: str, api_version: str, create, render, create_many=None):
    """201 with the object of a POSTed manifest, or with every item of a POSTed `<kind>List`,
    created in one transaction: one bad item is refused naming it (`items[i].<field>`) and
    nothing is created. `create_many`, if given, takes the whole list (a batch service
    function that names the bad item itself)."""
    items = manifests.list_items(body, kind)
    if items is None:
        return Response(render([create(body)])[0], status=status.HTTP_201_CREATED)
    if create_many is not None:
        created = create_many(items)
        return Response(manifests.created_list(f"{kind}List", api_version, render(created)),
                        status=status.HTTP_201_CREATED)
    created = []
    with transaction.atomic():
        for i, item in enumerate(items):
            try:
                created.append(create(item))
            except ServiceError as error:
                raise error.of_item(i) from None
    return Response(manifests.created_list(f"{kind}List", api_version, render(created)),
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
