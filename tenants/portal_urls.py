"""Portal routes of a tenant's people under /portal/ (joined with config_service/portal/urls.py
in the `portal` namespace by maas/urls.py)."""
from django.urls import path

from . import portal

T = "t/<slug:tenant>"

urlpatterns = [
    path(f"{T}/members/", portal.members, name="members"),
    path(f"{T}/members/<str:member>/role/", portal.member_role, name="member-role"),
    path(f"{T}/members/<str:member>/remove/", portal.member_remove, name="member-remove"),
    path(f"{T}/invitations/<uuid:invitation>/revoke/", portal.invitation_revoke,
         name="invitation-revoke"),
    path(f"{T}/delete/", portal.tenant_delete, name="tenant-delete"),
]
