"""OpenAPI security schemes of the API's bearer tokens (drf-spectacular finds them on import)."""
from drf_spectacular.extensions import OpenApiAuthenticationExtension


class OidcBearerScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.identity.authentication.OidcBearerAuthentication"
    name = "oidcBearer"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "An access token of the configured OpenID Connect provider: a JWT "
                               "(validated locally) or an opaque token (RFC 7662 introspection). "
                               "ID and refresh tokens are refused with 401 and the reason; "
                               "when the provider cannot be asked, 503 with Retry-After."}


class PersonalAccessTokenScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.authentication.PersonalAccessTokenAuthentication"
    name = "personalAccessToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "A personal access token, maas_pat_... (manage.py apitoken)."}
