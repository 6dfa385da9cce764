"""From claims to tenant roles and the operator flag: pure functions over the token's claims.

Groups such as `/tenants/acme/admin` or `tenants/acme/admin` (MAAS_OIDC_GROUP_PATTERN over
MAAS_OIDC_GROUPS_CLAIM; a leading slash is optional on both sides, since Keycloak writes full
paths and most providers plain names) and roles such as `tenant:acme:admin`
(MAAS_OIDC_ROLE_PATTERN over MAAS_OIDC_ROLES_CLAIMS: Keycloak's realm and client roles and a
flat `roles` claim) both map; the highest role per tenant wins.

A claim name in these settings is first read whole, as a top-level claim, then as a dotted path:
`https://example.com/groups` (Auth0's namespaced claims) and `cognito:groups` are names, and
`realm_access.roles` is a path unless the token has a claim of that very name.
"""
import re

from tenants.models import Role
from tenants.roles import RANK

from . import config


def values_at(claims: dict, path: str) -> list[str]:
    """The string values of the claim named `path`, else at the dotted path (`realm_access.roles`);
    one string is a list of one."""
    node = claims.get(path)
    if node is None:
        node = claims
        for part in path.split("."):
            if not isinstance(node, dict):
                return []
            node = node.get(part)
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [v for v in node if isinstance(v, str)]
    return []


def _pattern(template: str, *, group: bool = False) -> re.Pattern:
    if group:
        template = template.lstrip("/")
    regex = re.escape(template)
    regex = regex.replace(re.escape("{tenant}"), r"(?P<tenant>[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)")
    regex = regex.replace(re.escape("{role}"), "(?P<role>" + "|".join(Role.values) + ")")
    return re.compile(f"^/?{regex}$" if group else f"^{regex}$")


def _paths(setting: str) -> list[str]:
    value = config.get(setting)
    paths = value.split(",") if isinstance(value, str) else list(value)
    return [p.strip().replace("{client_id}", config.client_id()) for p in paths if p.strip()]


def tenant_roles(claims: dict) -> dict[str, str]:
    """{tenant slug: role} that the claims grant."""
    found: list[tuple[str, str]] = []
    for setting, template in (("MAAS_OIDC_GROUPS_CLAIM", "MAAS_OIDC_GROUP_PATTERN"),
                              ("MAAS_OIDC_ROLES_CLAIMS", "MAAS_OIDC_ROLE_PATTERN")):
        if not config.get(template):
            continue
        pattern = _pattern(config.get(template), group=setting == "MAAS_OIDC_GROUPS_CLAIM")
        for path in _paths(setting):
            for value in values_at(claims, path):
                match = pattern.match(value)
                if match:
                    found.append((match["tenant"], match["role"]))
    roles: dict[str, str] = {}
    for slug, role in found:
        if slug not in roles or RANK[role] > RANK[roles[slug]]:
            roles[slug] = role
    return roles


def is_staff(claims: dict) -> bool | None:
    """Whether the claims make an operator; None when no staff claim is configured."""
    value = config.get("MAAS_OIDC_STAFF_VALUE")
    paths = _paths("MAAS_OIDC_STAFF_CLAIM")
    if not paths or not value:
        return None
    return any(value in values_at(claims, path) for path in paths)


def username(claims: dict) -> str:
    """The first of MAAS_OIDC_USERNAME_CLAIMS that is set (preferred_username, email, sub)."""
    for path in _paths("MAAS_OIDC_USERNAME_CLAIMS"):
        found = values_at(claims, path)
        if found and found[0]:
            return found[0][:150]
    return str(claims.get("sub") or "")[:150]


USER_CLAIMS = ("preferred_username", "email", "name", "given_name", "family_name")


def service_client(claims: dict) -> str | None:
    """The client a token speaks for when its subject is that client, not a person (a
    client-credentials grant, RFC 9068 section 2.2: `sub` is the client's id), else None."""
    clients = {c for c in (claims.get("client_id"), claims.get("azp")) if isinstance(c, str) and c}
    sub = claims.get("sub")
    if claims.get("client_id") and sub == claims["client_id"]:
        return sub
    if sub in clients and not any(claims.get(name) for name in USER_CLAIMS):
        return sub
    return None
