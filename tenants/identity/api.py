"""REST API of members and invitations (owners invite, change and remove members) and of the
audit trail (tenant admins read their tenant's, staff read everyone's). Authorization goes
through tenant_for.

Members join by invitation only, by email: nothing here looks an account up by name or address
on an owner's behalf, so no answer differs between an address that has an account and one that
does not, and no account joins a tenant without accepting."""
import uuid

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.manifests import MAAS_API
from core.api.pagination import ListPagination
from core.api.schemas import CHANGE, READ, WRITE, errors
from core.context import Context
from core.errors import Invalid, NotFound
from eventlog.api import event
from eventlog.models import ConfigEvent
from tenants import invitations
from tenants.access import tenant_for
from tenants.models import Invitation, Membership, Role
from tenants.roles import Action
from tenants.services import add_member, keep_an_owner, remove_member

from . import api_schemas as schemas


class InvitationRequired(Invalid):
    """A member was asked for by username: members join by invitation, by email."""

    code = "invitation_required"


def _ctx(request) -> Context:
    actor = getattr(request, "auth_actor", None) or f"user:{request.user.get_username()}"
    return Context(actor=actor, request_id=getattr(request, "request_id", ""))


def _paged(view, request, queryset, render, kind: str):
    paginator = ListPagination()
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response([render(o) for o in page], kind, MAAS_API)


def member_resource(m: Membership) -> dict:
    return {"apiVersion": MAAS_API, "kind": "Member",
            "metadata": {"name": m.user.get_username()},
            "spec": {"role": m.role, "email": m.user.email},
            "status": {"since": m.created_at.isoformat(),
                       "signedInYet": m.user.last_login is not None}}


def _role(data) -> str:
    role = (data.get("spec") or {}).get("role", data.get("role")) if isinstance(data, dict) else None
    if role not in Role.values:
        raise Invalid(f"role must be one of {', '.join(Role.values)}", "spec.role")
    return role


class MemberList(APIView):
    @extend_schema(responses={200: schemas.MemberList, **READ},
                   summary="The tenant's members and their roles")
    def get(self, request, tenant):
        t = tenant_for(request.user, tenant, Action.READ)
        members = Membership.objects.filter(tenant=t).select_related("user").order_by(
            "user__username")
        return _paged(self, request, members, member_resource, "MemberList")

    @extend_schema(request=schemas.InvitationManifest,
                   responses={202: schemas.Invitation, **WRITE},
                   summary="Invite a member by email (owner): the same as POST .../invitations/, "
                           "answered 202 with the Invitation; a username is refused (400)")
    def post(self, request, tenant):
        t = tenant_for(request.user, tenant, Action.MANAGE_MEMBERS)
        data = request.data if isinstance(request.data, dict) else {}
        metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
        if "name" in metadata or "username" in data:
            # Refused whatever the name, before any lookup: the answer says nothing of accounts.
            raise InvitationRequired(
                "Members join by invitation: send {\"spec\": {\"email\": ..., \"role\": ...}} "
                f"here or to /api/v1/tenants/{t.slug}/invitations/; the person accepts it "
                "signed in with that address. A username is not accepted.", "metadata.name")
        invitation, body = create_invitation(request, t, data)
        response = Response(body, status=status.HTTP_202_ACCEPTED)
        response["Location"] = reverse("invitation-detail", kwargs={
            "tenant": t.slug, "invitation": str(invitation.uid)})
        add_never_cache_headers(response)  # the body holds the link, a secret shown once
        return response


class MemberDetail(APIView):
    def _get(self, t, name) -> Membership:
        m = Membership.objects.filter(tenant=t, user__username=name).select_related("user").first()
        if m is None:
            raise NotFound(f"{name} is not a member of {t.slug}.")
        return m

    @extend_schema(responses={200: schemas.Member, **READ})
    def get(self, request, tenant, member):
        t = tenant_for(request.user, tenant, Action.READ)
        return Response(member_resource(self._get(t, member)))

    @extend_schema(request=schemas.MemberUpdate, responses={200: schemas.Member, **WRITE},
                   summary="Change a member's role (owner)")
    def put(self, request, tenant, member):
        t = tenant_for(request.user, tenant, Action.MANAGE_MEMBERS)
        m = self._get(t, member)
        role = _role(request.data)
        with transaction.atomic():
            if m.role == Role.OWNER and role != Role.OWNER:
                keep_an_owner(t, member)
            m = add_member(ctx=_ctx(request), tenant=t, user=m.user, role=role)
        return Response(member_resource(m))

    patch = put

    @extend_schema(responses={204: None, **CHANGE}, summary="Remove a member (owner)")
    def delete(self, request, tenant, member):
        t = tenant_for(request.user, tenant, Action.MANAGE_MEMBERS)
        m = self._get(t, member)
        with transaction.atomic():
            if m.role == Role.OWNER:
                keep_an_owner(t, member)
            remove_member(ctx=_ctx(request), tenant=t, username=member)
        return Response(status=status.HTTP_204_NO_CONTENT)


def invitation_link(request, token: str) -> str:
    path = reverse("invitation", kwargs={"token": token})
    base = getattr(settings, "MAAS_PUBLIC_URL", "")
    return base.rstrip("/") + path if base else request.build_absolute_uri(path)


def invitation_resource(inv: Invitation, **extra) -> dict:
    return {"apiVersion": MAAS_API, "kind": "Invitation",
            "metadata": {"name": str(inv.uid), "creationTimestamp": inv.created_at.isoformat()},
            "spec": {"email": inv.email, "role": inv.role},
            "status": {"phase": inv.phase(timezone.now()), "expiresAt": inv.expires_at.isoformat(),
                       "invitedBy": inv.invited_by.get_username() if inv.invited_by else None,
                       "acceptedBy": inv.accepted_by.get_username() if inv.accepted_by else None,
                       **extra}}


def create_invitation(request, t, data: dict) -> tuple[Invitation, dict]:
    """Invites spec.email to spec.role, mails the link; the invitation and its resource with
    the link (status.acceptUrl), which no later read shows again."""
    spec = data.get("spec") if isinstance(data.get("spec"), dict) else data
    invitation, token = invitations.invite(
        ctx=_ctx(request), tenant=t, email=spec.get("email"), role=_role(data),
        invited_by=request.user)
    link = invitation_link(request, token)
    mailed = invitations.send(invitation, link)
    return invitation, invitation_resource(invitation, acceptUrl=link, emailSent=mailed)


class InvitationList(APIView):
    @extend_schema(responses={200: schemas.InvitationList, **READ},
                   summary="The tenant's invitations, newest first")
    def get(self, request, tenant):
        t = tenant_for(request.user, tenant, Action.READ)
        found = (Invitation.objects.filter(tenant=t).select_related("invited_by", "accepted_by")
                 .order_by("-created_at"))
        return _paged(self, request, found, invitation_resource, "InvitationList")

    @extend_schema(request=schemas.InvitationManifest,
                   responses={201: schemas.Invitation, **WRITE},
                   summary="Invite an email address to a role (owner); the link is mailed and "
                           "returned once, in status.acceptUrl (Cache-Control: no-store)")
    def post(self, request, tenant):
        t = tenant_for(request.user, tenant, Action.MANAGE_MEMBERS)
        _, body = create_invitation(request, t, request.data if isinstance(request.data, dict)
                                    else {})
        response = Response(body, status=status.HTTP_201_CREATED)
        add_never_cache_headers(response)  # the body holds the link, a secret shown once
        return response


class InvitationDetail(APIView):
    def _get(self, t, uid) -> Invitation:
        found = Invitation.objects.filter(tenant=t, uid=uid).first() if _is_uuid(uid) else None
        if found is None:
            raise NotFound(f"No invitation {uid} in {t.slug}.")
        return found

    @extend_schema(responses={200: schemas.Invitation, **READ})
    def get(self, request, tenant, invitation):
        t = tenant_for(request.user, tenant, Action.READ)
        return Response(invitation_resource(self._get(t, invitation)))

    @extend_schema(responses={204: None, **CHANGE}, summary="Revoke a pending invitation (owner)")
    def delete(self, request, tenant, invitation):
        t = tenant_for(request.user, tenant, Action.MANAGE_MEMBERS)
        invitations.revoke(ctx=_ctx(request), invitation=self._get(t, invitation))
        return Response(status=status.HTTP_204_NO_CONTENT)


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
        return True
    except ValueError:
        return False


AUDIT_PARAMS = [
    OpenApiParameter("after", OpenApiTypes.INT, description="position"),
    OpenApiParameter("actor", str), OpenApiParameter("type", str),
    OpenApiParameter("limit", int), OpenApiParameter("offset", int),
]


def _audit(view, request, events):
    params = request.query_params
    if params.get("after"):
        try:
            events = events.filter(position__gt=int(params["after"]))
        except ValueError:
            raise Invalid("after must be an event position", "after") from None
    if params.get("actor"):
        events = events.filter(actor=params["actor"])
    if params.get("type"):
        events = events.filter(type=params["type"])
    paginator = ListPagination()
    page = paginator.paginate_queryset(events.select_related("tenant").order_by("position"),
                                       request, view=view)
    # Plan events belong to no tenant (the operators' plans stream).
    items = [{**event(e), "tenant": e.tenant.slug if e.tenant else None}
             for e in page]
    return paginator.get_paginated_response(items, "AuditEventList", MAAS_API)


class TenantAudit(APIView):
    @extend_schema(parameters=AUDIT_PARAMS,
                   responses={200: schemas.AuditEventList, **READ, **errors(403)},
                   summary="Who changed what in the tenant (admins and owners)")
    def get(self, request, tenant):
        t = tenant_for(request.user, tenant, Action.READ_AUDIT)
        return _audit(self, request, ConfigEvent.objects.filter(tenant=t))


class Audit(APIView):
    staff_only = True  # read by the isolation matrix: no tenant, operators only

    @extend_schema(parameters=AUDIT_PARAMS + [OpenApiParameter("tenant", str)],
                   responses={200: schemas.AuditEventList, **errors(400, 401, 403)},
                   summary="Every tenant's audit trail (staff)")
    def get(self, request):
        if not request.user.is_staff:
            raise PermissionDenied("Only operators (staff) read every tenant's audit trail.")
        events = ConfigEvent.objects.all()
        if request.query_params.get("tenant"):
            events = events.filter(tenant__slug=request.query_params["tenant"])
        return _audit(self, request, events)
