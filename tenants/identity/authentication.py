"""DRF authentication by the provider's JWT access tokens: `Authorization: Bearer <JWT>`.

Validated locally (tokens.py); personal access tokens (`maas_pat_...`) are left to
tenants.authentication. Every refusal is a 401 whose body says why.
"""
from rest_framework import authentication, exceptions

from tenants.models import PersonalAccessToken

from . import config, provisioning
from .tokens import TokenRejected, validate_access_token


class OidcBearerAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or token.startswith(PersonalAccessToken.PREFIX):
            return None
        if not config.enabled():
            raise exceptions.AuthenticationFailed(
                "Invalid bearer token: no OpenID Connect provider is configured; use a personal "
                "access token.", code="oidc_not_configured")
        try:
            claims = validate_access_token(token)
        except TokenRejected as exc:
            request.bearer_error = exc.reason
            raise exceptions.AuthenticationFailed(f"Invalid bearer token: {exc.reason}.",
                                                  code=exc.code) from None
        user = provisioning.user_for_claims(
            claims, request_id=getattr(request, "request_id", ""), force=False)
        if not user.is_active:
            raise exceptions.AuthenticationFailed("Invalid bearer token: the user is disabled.",
                                                  code="user_inactive")
        client = claims.get("azp") or claims.get("client_id") or "oidc"
        request.auth_actor = f"oidc:{client}:{user.get_username()}"
        return user, claims

    def authenticate_header(self, request):
        return bearer_challenge(request)


def bearer_challenge(request) -> str:
    """The WWW-Authenticate header of a 401 (RFC 6750): OAuth clients read a refused token's
    reason there, as well as in the body."""
    reason = getattr(request, "bearer_error", None)
    if reason is None:
        return 'Bearer realm="maas"'
    description = reason.replace("\\", "").replace('"', "'")
    return f'Bearer realm="maas", error="invalid_token", error_description="{description}"'
