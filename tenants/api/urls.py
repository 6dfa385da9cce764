"""API routes of tenants themselves (included under /api/v1/)."""
from django.urls import path

from . import views as api

urlpatterns = [
    path("tenants/", api.TenantList.as_view(), name="tenant-list"),
    path("tenants/<slug:tenant>/", api.TenantDetail.as_view(), name="tenant-detail"),
    path("tenants/<slug:tenant>/quota/", api.TenantQuotaDetail.as_view(), name="tenant-quota"),
    path("tenants/<slug:tenant>/quota/evaluate/", api.TenantQuotaEvaluate.as_view(),
         name="tenant-quota-evaluate"),
]
