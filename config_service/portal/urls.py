"""Portal routes under /portal/ (the `portal` namespace) of tenants, their people, spaces and
what is in them."""
from django.urls import path

from . import connections, members, views

T = "t/<slug:tenant>"
S = f"{T}/spaces/<slug:space>"

urlpatterns = [
    path("", views.home, name="home"),
    path(f"{T}/", views.spaces, name="spaces"),
    path(f"{T}/usage/", views.usage, name="usage"),
    path(f"{T}/history/", views.history, name="history"),
    path(f"{S}/", views.space, name="space"),
    path(f"{S}/delete/", views.space_delete, name="space-delete"),
    path(f"{S}/plan/", views.space_plan, name="space-plan"),
    path(f"{S}/addresses/", views.address_rows, name="address-rows"),
    path(f"{S}/addresses/stats/", views.address_stats_view, name="address-stats"),
    path(f"{S}/addresses/new/", views.address_create, name="address-create"),
    path(f"{S}/addresses/bulk/", views.address_bulk, name="address-bulk"),
    path(f"{S}/addresses/<str:address>/plan/", views.address_plan, name="address-plan"),
    path(f"{S}/addresses/<str:address>/delete/", views.address_delete, name="address-delete"),
    path(f"{S}/addresses/<str:address>/purge/", views.address_purge, name="address-purge"),
    path(f"{S}/users/", views.users, name="users"),
    path(f"{S}/users/<str:user>/rotate/", views.user_rotate, name="user-rotate"),
    path(f"{S}/users/<str:user>/permissions/", views.user_permissions, name="user-permissions"),
    path(f"{S}/users/<str:user>/delete/", views.user_delete, name="user-delete"),
    path(f"{S}/connect/", views.connect, name="connect"),
    path(f"{S}/connections/", connections.connections, name="connections"),
    path(f"{S}/connections/rows/", connections.connection_rows, name="connection-rows"),
    path(f"{S}/connections/<str:connection>/close/", connections.connection_close,
         name="connection-close"),
    path(f"{T}/members/", members.members, name="members"),
    path(f"{T}/members/<str:member>/role/", members.member_role, name="member-role"),
    path(f"{T}/members/<str:member>/remove/", members.member_remove, name="member-remove"),
    path(f"{T}/invitations/<uuid:invitation>/revoke/", members.invitation_revoke,
         name="invitation-revoke"),
    path(f"{T}/delete/", members.tenant_delete, name="tenant-delete"),
]
