"""URL map: REST API under /api/v1/, its OpenAPI schema and docs, admin, health and metrics."""
from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from config_service.portal import urls as portal_pages

from . import health, metrics

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="portal:home"), name="root"),
    path("portal/", include((portal_pages.urlpatterns, "portal"))),
    path("", include("tenants.identity.urls")),
    path("api/v1/", include("tenants.api.urls")),
    path("api/v1/", include("config_service.api.urls")),
    path("api/v1/", include("tenants.identity.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("admin/", admin.site.urls),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.view, name="metrics"),
]
