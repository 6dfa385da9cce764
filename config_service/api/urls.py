"""Routes of the REST API under /api/v1/."""
from django.urls import path

from .views import address_spaces, addresses, connections, events, messaging_users, plans, usage

T = "tenants/<slug:tenant>"
S = f"{T}/addressspaces/<slug:space>"

urlpatterns = [
    path(f"{T}/addressspaces/", address_spaces.AddressSpaceList.as_view(), name="addressspace-list"),
    path(f"{S}/", address_spaces.AddressSpaceDetail.as_view(), name="addressspace-detail"),
    path(f"{S}/addresses/", addresses.AddressList.as_view(), name="address-list"),
    path(f"{S}/addresses/<str:address>/", addresses.AddressDetail.as_view(), name="address-detail"),
    path(f"{S}/addresses/<str:address>/purge/", addresses.AddressPurge.as_view(),
         name="address-purge"),
    path(f"{S}/users/", messaging_users.MessagingUserList.as_view(), name="messaginguser-list"),
    path(f"{S}/users/<str:user>/", messaging_users.MessagingUserDetail.as_view(),
         name="messaginguser-detail"),
    path(f"{S}/connections/", connections.ConnectionList.as_view(), name="connection-list"),
    path(f"{S}/connections/<str:connection>/", connections.ConnectionDetail.as_view(),
         name="connection-detail"),
    path(f"{T}/events/", events.EventList.as_view(), name="event-list"),
    path(f"{T}/usage/", usage.UsageView.as_view(), name="usage"),
    path("addressspaceplans/", plans.AddressSpacePlanList.as_view(), name="addressspaceplan-list"),
    path("addressspaceplans/<slug:plan>/", plans.AddressSpacePlanDetail.as_view(),
         name="addressspaceplan-detail"),
    path("addressplans/", plans.AddressPlanList.as_view(), name="addressplan-list"),
    path("addressplans/<slug:plan>/", plans.AddressPlanDetail.as_view(),
         name="addressplan-detail"),
]
