"""Messaging users of a space: list, create one or a list, read, replace or patch, delete."""
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import manifests
from core.api.schemas import CHANGE, READ, WRITE
from tenants.roles import Action

from ... import services
from ...models import MessagingUser
from ...status import agent_states
from .. import resources, schemas
from ..merge_patch import patched_spec
from ..parsers import PARSERS
from .common import LIST_PARAMS, SpaceMixin, created, ctx_of, paged, same_name


class MessagingUserList(SpaceMixin, APIView):
    @extend_schema(parameters=LIST_PARAMS[:2], responses={200: schemas.MessagingUserList, **READ})
    def get(self, request, tenant, space):
        s = self.space(request, tenant, space, Action.READ)
        states = agent_states([s.uid]).get(s.uid, {})
        users = MessagingUser.objects.filter(space=s).order_by("username")
        return paged(self, request, users, lambda u: resources.messaging_user(s, u, states),
                      "MessagingUserList", manifests.USER_API)

    @extend_schema(request=schemas.MessagingUserManifestOrList,
                   responses={201: schemas.MessagingUserOrList, **WRITE},
                   summary="Create a messaging user (an EnMasse MessagingUser manifest), or "
                           "every item of a MessagingUserList or none")
    def post(self, request, tenant, space):
        s = self.space(request, tenant, space, Action.MANAGE_USERS)
        ctx = ctx_of(request)

        def create(body):
            metadata, spec = manifests.read(body, "MessagingUser")
            return services.create_messaging_user(
                ctx=ctx, space=s, name=metadata.get("name"), username=spec.get("username"),
                authentication=spec.get("authentication"),
                authorization=spec.get("authorization"),
            )

        return created(request.data, "MessagingUser", manifests.USER_API, create,
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
        metadata, spec = manifests.read(request.data, "MessagingUser")
        return self._write(request, s, user, metadata, spec)

    @extend_schema(request=schemas.MessagingUserUpdate,
                   responses={200: schemas.MessagingUser, **WRITE},
                   summary="Change the spec of a user by a JSON merge patch")
    def patch(self, request, tenant, space, user):
        s = self.space(request, tenant, space, Action.MANAGE_USERS)
        current = self._get(s, user)
        metadata, _ = manifests.read(request.data, "MessagingUser")
        spec = patched_spec(resources.messaging_user(s, current, {})["spec"], request.data)
        return self._write(request, s, user, metadata, spec)

    def _write(self, request, s, user, metadata, spec):
        same_name(metadata, user)
        authentication = spec.get("authentication")
        if isinstance(authentication, dict) and "password" not in authentication:
            authentication = None  # the password is write-only: not given, it stays
        updated = services.update_messaging_user(
            ctx=ctx_of(request), space=s, name=user, username=spec.get("username"),
            authentication=authentication, authorization=spec.get("authorization") or [],
            expected_version=manifests.expected_version(request, metadata),
        )
        return Response(resources.messaging_user(s, updated,
                                                 agent_states([s.uid]).get(s.uid, {})))

    @extend_schema(responses={204: None, **CHANGE})
    def delete(self, request, tenant, space, user):
        s = self.space(request, tenant, space, Action.MANAGE_USERS)
        self._get(s, user)
        services.delete_messaging_user(ctx=ctx_of(request), space=s, name=user,
                                       expected_version=manifests.expected_version(request, {}))
        return Response(status=status.HTTP_204_NO_CONTENT)
