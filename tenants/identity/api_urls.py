"""API routes of members and the audit trail (included under /api/v1/)."""
from django.urls import path

from . import api

T = "tenants/<slug:tenant>"

urlpatterns = [
    path(f"{T}/members/", api.MemberList.as_view(), name="member-list"),
    path(f"{T}/members/<str:member>/", api.MemberDetail.as_view(), name="member-detail"),
    path(f"{T}/invitations/", api.InvitationList.as_view(), name="invitation-list"),
    path(f"{T}/invitations/<str:invitation>/", api.InvitationDetail.as_view(),
         name="invitation-detail"),
    path(f"{T}/audit/", api.TenantAudit.as_view(), name="tenant-audit"),
    path("audit/", api.Audit.as_view(), name="audit"),
]
