"""Sign-in and sign-out pages, the portal's and the admin site's: through the provider when one
is configured (sign-out then ends the provider's session too), with local accounts otherwise."""
from urllib.parse import urlencode

from django.contrib import admin, auth
from django.contrib.auth import views as auth_views
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import render, resolve_url
from django.urls import reverse
from django.views.decorators.http import require_POST
from mozilla_django_oidc import views as oidc_views

from . import config


class OidcAuthenticate(oidc_views.OIDCAuthenticationRequestView):
    get_settings = staticmethod(config.oidc_setting)

    def dispatch(self, request, *args, **kwargs):
        if not config.enabled():
            return HttpResponseRedirect(reverse("login"))
        try:
            return super().dispatch(request, *args, **kwargs)
        except config.ProviderUnavailable:
            return HttpResponse("The identity provider cannot be reached; try again later.",
                                status=503, content_type="text/plain")

    def __init__(self, *args, **kwargs):
        super(oidc_views.OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)

    OIDC_OP_AUTH_ENDPOINT = property(lambda self: config.discovery()["authorization_endpoint"])
    OIDC_RP_CLIENT_ID = property(lambda self: config.client_id())


class OidcCallback(oidc_views.OIDCAuthenticationCallbackView):
    get_settings = staticmethod(config.oidc_setting)

    @property
    def failure_url(self):
        return reverse("login") + "?failed=1"


def login(request):
    """The provider's login page when one is configured, Django's form otherwise."""
    if config.enabled() and "failed" not in request.GET:
        query = urlencode({"next": request.GET["next"]}) if request.GET.get("next") else ""
        return HttpResponseRedirect(reverse("oidc_authentication_init")
                                    + (f"?{query}" if query else ""))
    if config.enabled():
        return render(request, "tenants/sign_in_failed.html", status=401)
    return auth_views.LoginView.as_view()(request)


def admin_login(request):
    """The admin site's sign-in: the provider's, like the portal's, when one is configured.

    Operators are staff by their claims (MAAS_OIDC_STAFF_CLAIM), so a password form would only
    let in accounts that bypass the realm. A signed-in member who is no operator gets 403 here:
    sending them to the provider again would come straight back, in a loop.
    """
    if not config.enabled():
        return admin.site.login(request)
    if request.user.is_authenticated:
        return render(request, "tenants/not_an_operator.html", status=403)
    next_url = request.GET.get("next") or reverse("admin:index")
    return HttpResponseRedirect(reverse("oidc_authentication_init") + "?"
                                + urlencode({"next": next_url}))


@require_POST
def logout(request):
    """Ends the session here and, after a provider sign-in, at the provider too."""
    id_token = request.session.get("oidc_id_token")
    auth.logout(request)
    done = request.build_absolute_uri(reverse("signed-out"))
    if config.enabled() and id_token:
        try:
            # Read again unless read within the floor: signing out is rare, and a provider that
            # dropped the endpoint must not leave every sign-out on its 404 page.
            end_session = config.discovery(
                max_age=config.get("MAAS_OIDC_DISCOVERY_MIN_REFRESH")).get("end_session_endpoint")
        except config.ProviderUnavailable:
            end_session = None
        if end_session:
            query = urlencode({"id_token_hint": id_token, "client_id": config.client_id(),
                               "post_logout_redirect_uri": done})
            return HttpResponseRedirect(f"{end_session}?{query}")
    return HttpResponseRedirect(done)


def signed_out(request):
    return render(request, "tenants/signed_out.html", {"login_url": resolve_url("login")})
