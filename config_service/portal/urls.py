"""Portal routes under /portal/ of tenants, spaces and what is in them; maas/urls.py joins them
with the people pages of tenants/portal_urls.py in the `portal` namespace."""
from django.urls import path

from . import views

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
]
