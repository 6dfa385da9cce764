"""What every portal page needs: the tenant (404 for outsiders), the user's role, the actor."""
from dataclasses import dataclass

from django.contrib import messages
from django.shortcuts import get_object_or_404

from core.context import Context
from core.errors import ServiceError
from tenants.access import role_of, tenant_for, visible_tenants
from tenants.models import Tenant
from tenants.roles import Action, role_allows

from ..models import AddressSpace


@dataclass
class Page:
    tenant: Tenant
    role: str | None
    can_manage: bool  # addresses, users, spaces
    can_change_plan: bool
    tenants: list

    def context(self, **extra) -> dict:
        return {"tenant": self.tenant, "role": self.role, "can_manage": self.can_manage,
                "can_change_plan": self.can_change_plan, "tenants": self.tenants, **extra}


def page(request, slug: str, action: Action = Action.READ) -> Page:
    tenant = tenant_for(request.user, slug, action)
    role = "staff" if request.user.is_staff else role_of(request.user, tenant)

    def allows(a: Action) -> bool:
        return request.user.is_staff or role_allows(role, a)

    return Page(tenant, role, allows(Action.MANAGE_ADDRESSES), allows(Action.CHANGE_SPACE_PLAN),
                list(visible_tenants(request.user).order_by("slug")[:200]))


def space_of(p: Page, name: str) -> AddressSpace:
    return get_object_or_404(AddressSpace.objects.select_related("tenant"), tenant=p.tenant,
                             name=name)


def ctx(request) -> Context:
    return Context(actor=f"user:{request.user.get_username()}",
                            request_id=getattr(request, "request_id", ""))


def attempt(request, form, call) -> bool:
    """Runs a service call; a ServiceError becomes a form error on its field, nothing changes."""
    try:
        call()
        return True
    except ServiceError as exc:
        field = (exc.field or "").split(".")[-1]
        if field in form.fields:
            form.add_error(field, exc.message)
        else:
            form.add_error(None, exc.message)
        messages.error(request, exc.message)
        return False
