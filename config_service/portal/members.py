"""Portal pages of a tenant's people: members and their roles, invitations by email, and
deleting the tenant. Owners (and staff) change things; every write goes through the tenant
service functions, which check the role table again."""
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from core.errors import ServiceError
from tenants import invitations
from tenants.identity.api import invitation_link
from tenants.models import Invitation, Membership
from tenants.roles import Action, role_allows
from tenants.services import add_member, delete_tenant, keep_an_owner, remove_member

from . import forms
from .base import attempt, ctx, page


@never_cache  # shows an invitation's link once: no browser or proxy may keep the page
@login_required
def members(request, tenant):
    p = page(request, tenant)
    form, shown = forms.InviteForm(), None
    if request.method == "POST":
        p = page(request, tenant, Action.MANAGE_MEMBERS)
        form = forms.InviteForm(request.POST)
        created = {}

        def call():
            created["invitation"], created["token"] = invitations.invite(
                ctx=ctx(request), tenant=p.tenant, email=form.cleaned_data["email"],
                role=form.cleaned_data["role"], invited_by=request.user)

        if form.is_valid() and attempt(request, form, call):
            link = invitation_link(request, created["token"])
            mailed = invitations.send(created["invitation"], link)
            shown = (created["invitation"].email, link, mailed)
            form = forms.InviteForm()
    can_manage_members = request.user.is_staff or role_allows(p.role, Action.MANAGE_MEMBERS)
    return render(request, "portal/members.html", p.context(
        members=Membership.objects.filter(tenant=p.tenant).select_related("user")
        .order_by("user__username"),
        invitations=invitations.pending(p.tenant).select_related("invited_by")
        .order_by("-created_at"),
        form=form, shown=shown, can_manage_members=can_manage_members,
        role_choices=forms.ROLE_CHOICES, now=timezone.now()))


@login_required
@require_POST
def member_role(request, tenant, member):
    p = page(request, tenant, Action.MANAGE_MEMBERS)
    m = get_object_or_404(Membership.objects.select_related("user"), tenant=p.tenant,
                          user__username=member)
    form = forms.RoleForm(request.POST)
    if form.is_valid():
        try:
            with transaction.atomic():
                if m.role == "owner" and form.cleaned_data["role"] != "owner":
                    keep_an_owner(p.tenant, member)
                add_member(ctx=ctx(request), tenant=p.tenant, user=m.user,
                           role=form.cleaned_data["role"])
            messages.success(request, f"{member} is now {form.cleaned_data['role']}.")
        except ServiceError as exc:
            messages.error(request, exc.message)
    return redirect("portal:members", tenant=tenant)


@login_required
def member_remove(request, tenant, member):
    p = page(request, tenant, Action.MANAGE_MEMBERS)
    m = get_object_or_404(Membership, tenant=p.tenant, user__username=member)
    if request.method == "POST":
        try:
            with transaction.atomic():
                if m.role == "owner":
                    keep_an_owner(p.tenant, member)
                remove_member(ctx=ctx(request), tenant=p.tenant, username=member)
            messages.success(request, f"{member} was removed from {tenant}.")
        except ServiceError as exc:
            messages.error(request, exc.message)
        return redirect("portal:members", tenant=tenant)
    return render(request, "portal/confirm.html", p.context(
        title=f"Remove {member} from {tenant}?",
        body="They lose access at once. Memberships from the identity provider's groups come "
             "back at their next sign-in unless the group is removed there too.",
        back=f"/portal/t/{tenant}/members/"))


@login_required
@require_POST
def invitation_revoke(request, tenant, invitation):
    p = page(request, tenant, Action.MANAGE_MEMBERS)
    found = get_object_or_404(Invitation, tenant=p.tenant, uid=invitation)
    try:
        invitations.revoke(ctx=ctx(request), invitation=found)
        messages.success(request, f"The invitation of {found.email} was revoked.")
    except ServiceError as exc:
        messages.error(request, exc.message)
    return redirect("portal:members", tenant=tenant)


@login_required
def tenant_delete(request, tenant):
    p = page(request, tenant, Action.DELETE_TENANT)
    form = forms.DeleteTenantForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        if form.cleaned_data["name"] != p.tenant.slug:
            form.add_error("name", f"Type {p.tenant.slug} exactly to delete it.")
        elif attempt(request, form, lambda: delete_tenant(ctx=ctx(request), tenant=p.tenant)):
            messages.success(request, f"Tenant {tenant} is being deleted.")
            return redirect("portal:home")
    spaces = p.tenant.address_spaces.order_by("name")
    return render(request, "portal/tenant_delete.html", p.context(form=form, spaces=spaces))
