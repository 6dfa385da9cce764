"""DOT's endpoints under /o/ (the issuer), its RFC 8414 metadata at the root (the only place it
lists introspection), and Django's login page."""
from django.contrib.auth import views as auth_views
from django.urls import include, path
from oauth2_provider import urls as oauth2_urls

urlpatterns = [
    path("o/", include(oauth2_urls)),
    *oauth2_urls.metadata_urlpatterns,
    path("accounts/login/", auth_views.LoginView.as_view()),
]
