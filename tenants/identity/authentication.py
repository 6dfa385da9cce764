"""DRF authentication by the provider's access tokens: `Authorization: Bearer <token>`.

A JWT is validated locally (tokens.py), an opaque token by introspection at the provider
(introspection.py); personal access tokens (`maas_pat_...`) are left to tenants.authentication. A token only finds the user a sign-in provisioned: it never creates one
nor changes roles. Every refusal says why: 401 for a bad token or a subject that never signed
in, 403 for a client's own token (a service identity, which has no tenant role), and 503 with
Retry-After when the provider cannot be asked (a 401 would make clients drop good tokens).
"""
import logging

from rest_framework import authentication, exceptions

from tenants.models import PersonalAccessToken

from . import claims as mapping
from . import config, provisioning
from .introspection import introspect
from .tokens import TokenRejected, Unavailable, is_jwt, validate_access_token

logger = logging.getLogger(__name__)


class ServiceUnavailable(exceptions.APIException):
    """503: the token may be good, the provider could not say (DRF adds Retry-After: wait)."""

    status_code = 503
    default_code = "provider_unavailable"

    def __init__(self, detail: str, code: str, wait: int):
        super().__init__(detail, code)
        self.wait = wait


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
            claims = validate_access_token(token) if is_jwt(token) else introspect(token)
        except Unavailable as exc:
            logger.warning("oidc.provider_unavailable", extra={"code": exc.code,
                                                               "reason": exc.reason})
            raise ServiceUnavailable(
                f"The identity provider cannot check the token now: {exc.reason}; try again in "
                f"{exc.retry_after} s.", exc.code, exc.retry_after) from None
        except TokenRejected as exc:
            request.bearer_error = exc.reason
            raise exceptions.AuthenticationFailed(f"Invalid bearer token: {exc.reason}.",
                                                  code=exc.code) from None
        service = mapping.service_client(claims)
        if service is not None:
            request.auth_actor = f"service:{service}"
            logger.info("oidc.service_token_refused", extra={"actor": request.auth_actor})
            raise exceptions.PermissionDenied(
                f"The token is the client {service!r}'s own (client credentials): a service "
                "account has no tenant role unless one is granted, which MaaS does not support "
                "yet. Use a person's token or a personal access token.",
                code="service_account_without_role")
        try:
            user = provisioning.user_for_access_token(claims)
        except provisioning.NotSignedIn:
            request.bearer_error = "the user has not signed in to MaaS yet"
            raise exceptions.AuthenticationFailed(
                "Invalid bearer token: the user has not signed in to MaaS yet; sign in once in "
                "the browser (/accounts/login/), which sets up the account and its tenant roles, "
                "then use the token.", code="sign_in_required") from None
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
