"""Browser sign-in: mozilla-django-oidc's authorization code flow (with PKCE), its endpoints
taken from the issuer's discovery document, the ID token checked locally, and the user
provisioned and updated from the claims at each sign-in."""
import logging

import requests
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from . import config, provisioning, session
from .tokens import TokenRejected, is_jwt, validate_access_token, validate_id_token

logger = logging.getLogger(__name__)


class OidcBackend(OIDCAuthenticationBackend):
    """Does nothing when no provider is configured; local accounts use ModelBackend."""

    get_settings = staticmethod(config.oidc_setting)

    def __init__(self, *args, **kwargs):
        # The base class reads every endpoint here, and Django builds a backend per request to
        # load the session's user: endpoints are read only when a sign-in needs them.
        self.UserModel = get_user_model()

    OIDC_OP_TOKEN_ENDPOINT = property(lambda self: config.discovery()["token_endpoint"])
    OIDC_OP_USER_ENDPOINT = property(lambda self: config.discovery().get("userinfo_endpoint"))
    OIDC_OP_JWKS_ENDPOINT = property(lambda self: config.discovery()["jwks_uri"])
    OIDC_RP_CLIENT_ID = property(lambda self: config.client_id())
    OIDC_RP_CLIENT_SECRET = property(lambda self: config.get("MAAS_OIDC_CLIENT_SECRET"))
    OIDC_RP_SIGN_ALGO = "RS256"
    OIDC_RP_IDP_SIGN_KEY = None

    def authenticate(self, request, **kwargs):
        if not config.enabled():
            return None
        try:
            return super().authenticate(request, **kwargs)
        except (TokenRejected, config.ProviderUnavailable) as exc:
            logger.warning("oidc.sign_in_refused", extra={"reason": str(exc)})
            return None
        except requests.RequestException as exc:  # the token or userinfo endpoint failed
            config.discovery_failed(f"sign-in: {exc}")
            logger.warning("oidc.sign_in_failed", extra={"reason": str(exc)})
            return None

    def get_token(self, payload):
        self.token_info = super().get_token(payload)  # with the refresh token, for session.py
        return self.token_info

    def verify_token(self, token, **kwargs):
        return validate_id_token(token, kwargs.get("nonce"))

    def get_userinfo(self, access_token, id_token, payload):
        """The ID token's claims with those of the access token when it is a JWT (Keycloak
        puts realm_access there); the userinfo endpoint only for an opaque access token."""
        if not is_jwt(access_token):
            return {**super().get_userinfo(access_token, id_token, payload), **payload}
        try:
            access = validate_access_token(access_token)
        except TokenRejected as exc:
            raise SuspiciousOperation(f"access token refused: {exc.reason}") from None
        if access.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("the access token is for another subject")
        return {**access, **payload}

    def verify_claims(self, claims):
        return bool(claims.get("sub"))

    def get_or_create_user(self, access_token, id_token, payload):
        claims = self.get_userinfo(access_token, id_token, payload)
        if not self.verify_claims(claims):
            raise SuspiciousOperation("the claims name no subject")
        request_id = getattr(self.request, "request_id", "")
        user = provisioning.user_for_claims(claims, request_id=request_id, force=True)
        session.remember(self.request.session, getattr(self, "token_info", {}), claims["sub"])
        return user
