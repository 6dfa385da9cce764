"""Addresses of a space: list (filtered by type, phase, search), create one or a list, read,
replace or patch, delete, purge."""
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import manifests
from core.api.schemas import CHANGE, READ, WRITE
from core.errors import Invalid, ServiceError
from tenants.roles import Action

from ... import services
from ...models import Address
from ...status import agent_states, phase_filter
from .. import resources, schemas
from ..merge_patch import patched_spec
from ..parsers import PARSERS
from .common import LIST_PARAMS, SpaceMixin, created, ctx_of, paged, phase_param, same_name


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
        phase = phase_param(request)
        if phase:
            addresses = addresses.filter(phase_filter(s, phase, states))
        return paged(self, request, addresses, lambda a: resources.address(s, a, states),
                      "AddressList", manifests.ENMASSE)

    @extend_schema(request=schemas.AddressManifestOrList,
                   responses={201: schemas.AddressOrList, **WRITE},
                   summary="Create an address (an EnMasse Address manifest), or every item of "
                           "an AddressList or none")
    def post(self, request, tenant, space):
        s = self.space(request, tenant, space, Action.MANAGE_ADDRESSES)
        ctx = ctx_of(request)

        def arguments(body):
            metadata, spec = manifests.read(body, "Address")
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

        return created(request.data, "Address", manifests.ENMASSE, create, render,
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
        metadata, spec = manifests.read(request.data, "Address")
        return self._write(request, s, address, metadata, spec)

    @extend_schema(request=schemas.AddressUpdate, responses={200: schemas.Address, **WRITE},
                   summary="Change the spec of an address by a JSON merge patch")
    def patch(self, request, tenant, space, address):
        s = self.space(request, tenant, space, Action.MANAGE_ADDRESSES)
        current = self._get(s, address)
        metadata, _ = manifests.read(request.data, "Address")
        spec = patched_spec(resources.address(s, current, {})["spec"], request.data)
        return self._write(request, s, address, metadata, spec)

    def _write(self, request, s, address, metadata, spec):
        same_name(metadata, address)
        if "plan" not in spec:
            raise Invalid("spec.plan is required", "spec.plan")
        addr = services.update_address(
            ctx=ctx_of(request), space=s, name=address, plan=spec["plan"],
            deadletter=spec.get("deadletter"), expiry=spec.get("expiry"), spec=spec,
            address=spec.get("address"), type=spec.get("type"), topic=spec.get("topic"),
            expected_version=manifests.expected_version(request, metadata),
        )
        return Response(resources.address(s, addr, agent_states([s.uid]).get(s.uid, {})))

    @extend_schema(responses={204: None, **CHANGE})
    def delete(self, request, tenant, space, address):
        s = self.space(request, tenant, space, Action.MANAGE_ADDRESSES)
        self._get(s, address)
        services.delete_address(ctx=ctx_of(request), space=s, name=address,
                                expected_version=manifests.expected_version(request, {}))
        return Response(status=status.HTTP_204_NO_CONTENT)


class AddressPurge(SpaceMixin, APIView):
    @extend_schema(request=None, responses={202: schemas.Address, **CHANGE},
                   summary="Drop every stored message of a queue, subscription or deadletter "
                           "address (carried out by the storage agent, once)")
    def post(self, request, tenant, space, address):
        s = self.space(request, tenant, space, Action.MANAGE_ADDRESSES)
        get_object_or_404(Address, space=s, name=address)
        addr = services.purge_address(ctx=ctx_of(request), space=s, name=address)
        return Response(resources.address(s, addr, agent_states([s.uid]).get(s.uid, {})),
                        status=status.HTTP_202_ACCEPTED)
