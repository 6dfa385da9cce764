"""Signed-in pages outside the portal: who you are, and an invitation to accept."""
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache

from core.context import Context
from core.errors import ServiceError

from . import invitations
from .access import visible_tenants
from .models import Membership


@login_required
def me(request):
    roles = dict(Membership.objects.filter(user=request.user)
                 .values_list("tenant__slug", "role"))
    tenants = [(t, roles.get(t.slug, "staff")) for t in visible_tenants(request.user)]
    return render(request, "tenants/me.html", {"tenants": tenants})


@never_cache  # its URL is the secret: kept nowhere, not even in a shared cache
@login_required
def invitation(request, token):
    """The link of an invitation mail: shows it, and accepts it on POST."""
    try:
        found = invitations.find(token)
    except ServiceError as exc:
        return render(request, "tenants/invitation.html", {"error": exc.message}, status=404)
    if found.accepted_by_id == request.user.pk:  # accepted already, e.g. at this sign-in
        messages.success(request, f"You are a member of {found.tenant.slug}.")
        return redirect("portal:spaces", tenant=found.tenant.slug)
    if request.method == "POST":
        ctx = Context(actor=f"user:{request.user.get_username()}",
                      request_id=getattr(request, "request_id", ""))
        try:
            membership = invitations.accept(ctx=ctx, invitation=found, user=request.user)
        except ServiceError as exc:
            return render(request, "tenants/invitation.html",
                          {"invitation": found, "error": exc.message}, status=exc.status)
        messages.success(request, f"You joined {found.tenant.slug} as {membership.role}.")
        return redirect("portal:spaces", tenant=found.tenant.slug)
    return render(request, "tenants/invitation.html", {"invitation": found})
