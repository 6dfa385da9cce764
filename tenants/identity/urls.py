"""Sign-in, sign-out and the OpenID Connect callback (included at the site's root, before the
admin site, whose sign-in and sign-out these replace)."""
from django.urls import path

from tenants import views as tenant_views

from . import views

urlpatterns = [
    path("accounts/login/", views.login, name="login"),
    path("accounts/logout/", views.logout, name="logout"),
    path("admin/login/", views.admin_login, name="admin-login"),
    path("admin/logout/", views.logout, name="admin-logout"),
    path("accounts/signed-out/", views.signed_out, name="signed-out"),
    path("accounts/me/", tenant_views.me, name="account"),
    path("invitations/<str:token>/", tenant_views.invitation, name="invitation"),
    path("oidc/authenticate/", views.OidcAuthenticate.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", views.OidcCallback.as_view(), name="oidc_authentication_callback"),
]
