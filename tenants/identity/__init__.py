"""Identity: sign-in with an OpenID Connect provider (a Keycloak realm), API bearer tokens
validated locally against its keys, and the mapping of its claims to tenants and roles."""
