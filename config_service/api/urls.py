"""Routes of the REST API under /api/v1/."""
from django.urls import path

from . import usage, views

T = "tenants/<slug:tenant>"
S = f"{T}/addressspaces/<slug:space>"

urlpatterns = [
    path(f"{T}/addressspaces/", views.AddressSpaceList.as_view(), name="addressspace-list"),
    path(f"{S}/", views.AddressSpaceDetail.as_view(), name="addressspace-detail"),
    path(f"{S}/addresses/", views.AddressList.as_view(), name="address-list"),
    path(f"{S}/addresses/<str:address>/", views.AddressDetail.as_view(), name="address-detail"),
    path(f"{S}/addresses/<str:address>/purge/", views.AddressPurge.as_view(),
         name="address-purge"),
    path(f"{S}/users/", views.MessagingUserList.as_view(), name="messaginguser-list"),
    path(f"{S}/users/<str:user>/", views.MessagingUserDetail.as_view(),
         name="messaginguser-detail"),
    path(f"{T}/events/", views.EventList.as_view(), name="event-list"),
    path(f"{T}/usage/", usage.UsageView.as_view(), name="usage"),
    path("addressspaceplans/", views.AddressSpacePlanList.as_view(), name="addressspaceplan-list"),
    path("addressspaceplans/<slug:plan>/", views.AddressSpacePlanDetail.as_view(),
         name="addressspaceplan-detail"),
    path("addressplans/", views.AddressPlanList.as_view(), name="addressplan-list"),
    path("addressplans/<slug:plan>/", views.AddressPlanDetail.as_view(),
         name="addressplan-detail"),
]
