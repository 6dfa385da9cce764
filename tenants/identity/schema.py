"""OpenAPI security schemes of the API's bearer tokens (drf-spectacular finds them on import)."""
from drf_spectacular.extensions import OpenApiAuthenticationExtension


class OidcBearerScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.identity.authentication.OidcBearerAuthentication"
    name = "oidcBearer"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": "JWT",
                "description": "An access token of the configured OpenID Connect realm."}


class PersonalAccessTokenScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.authentication.PersonalAccessTokenAuthentication"
    name = "personalAccessToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "A personal access token, maas_pat_... (manage.py apitoken)."}
