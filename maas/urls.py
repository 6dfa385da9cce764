"""URL map: REST API under /api/v1/, its OpenAPI schema and docs, admin, health and metrics."""
from django.contrib import admin
from django.http import JsonResponse
from django.urls import include, path
from django.views import defaults
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


def _api_error(request, status: int, code: str, message: str):
    return JsonResponse({"status": status, "code": code, "message": message, "detail": message},
                        status=status)


def handler404(request, exception=None):
    """The API's one error shape on every /api/ path, also one no view matches (`..`, `%2F`,
    a typo); Django's page elsewhere."""
    if request.path.startswith("/api/"):
        return _api_error(request, 404, "not_found", "Not found.")
    return defaults.page_not_found(request, exception)


def handler500(request):
    if request.path.startswith("/api/"):
        return _api_error(request, 500, "error", "Internal server error.")
    return defaults.server_error(request)
