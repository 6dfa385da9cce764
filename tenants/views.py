"""The signed-in page: who you are and your role in each of your tenants."""
from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from .access import visible_tenants
from .models import Membership


@login_required
def me(request):
    roles = dict(Membership.objects.filter(user=request.user)
                 .values_list("tenant__slug", "role"))
    tenants = [(t, roles.get(t.slug, "staff")) for t in visible_tenants(request.user)]
    return render(request, "tenants/me.html", {"tenants": tenants})
