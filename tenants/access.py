"""Looks up a tenant for a user and checks the role table; non-members get 404, never 403."""
from django.core.exceptions import PermissionDenied  # 403 in the API and the portal alike
from django.http import Http404

from .models import Membership, Tenant
from .roles import Action, role_allows


def role_of(user, tenant: Tenant) -> str | None:
    if not user.is_authenticated:
        return None
    membership = Membership.objects.filter(tenant=tenant, user=user).only("role").first()
    return membership.role if membership else None


def tenant_for(user, slug: str, action: Action) -> Tenant:
    """The tenant `slug` if `user` may do `action` on it.

    Someone who is not a member cannot learn that the tenant exists (404). A member whose role
    does not allow the action gets 403. Staff may do everything.
    """
    if user.is_staff:
        tenant = Tenant.objects.live().filter(slug=slug).first()
        if tenant is None:
            raise Http404("No such tenant.")
        return tenant
    # The tenant and the member's role in one query (every API call starts here).
    membership = (Membership.objects.filter(tenant__slug=slug, tenant__deleted_at__isnull=True,
                                            user=user).select_related("tenant").first()
                  if user.is_authenticated else None)
    if membership is None:
        raise Http404("No such tenant.")
    check_role(membership.role, slug, action)
    return membership.tenant


def check_role(role: str, slug: str, action: Action) -> None:
    """403 unless a member of tenant `slug` with `role` may do `action`."""
    if not role_allows(role, action):
        raise PermissionDenied(f"Your role '{role}' in tenant '{slug}' does not allow "
                               f"{action.value}.")


def visible_tenants(user):
    if user.is_staff:
        return Tenant.objects.live()
    return Tenant.objects.live().filter(memberships__user=user).distinct()
