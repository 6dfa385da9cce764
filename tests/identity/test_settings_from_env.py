"""Every identity setting comes from the environment (an operator of a container cannot edit
settings.py): a fresh Django process with MAAS_OIDC_* set reads them, lists comma-separated, and
a client authentication method it does not know stops it with the variable's name."""
import json
import os
import subprocess
import sys

from django.conf import settings

ENV = {
    "MAAS_OIDC_SCOPES": "openid email profile groups",
    "MAAS_OIDC_GROUPS_CLAIM": "memberOf,groups",
    "MAAS_OIDC_ROLES_CLAIMS": "roles,app_roles",
    "MAAS_OIDC_GROUP_PATTERN": "maas-{tenant}-{role}",
    "MAAS_OIDC_STAFF_CLAIM": "roles",
    "MAAS_OIDC_USERNAME_CLAIMS": "upn,email",
    "MAAS_OIDC_CLIENT_AUTH": "client_secret_basic",
    "MAAS_OIDC_INTROSPECTION_ENDPOINT": "https://sso.example/introspect",
    "MAAS_OIDC_INTROSPECTION_CACHE": "15",
    "MAAS_OIDC_INTROSPECTION_TIMEOUT": "0.5",
    "MAAS_OIDC_INTROSPECTION_CONCURRENCY": "3",
    "MAAS_OIDC_DISCOVERY_MIN_REFRESH": "5",
    "MAAS_OIDC_AUDIENCES": "maas,https://maas.example/api/",
}
SHOW = ("import django, json; django.setup(); from django.conf import settings as s; "
        "print(json.dumps({k: getattr(s, k) for k in %r}))")


def read_settings(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SHOW % sorted(ENV)], capture_output=True,
                          text=True, timeout=60, cwd=settings.BASE_DIR,
                          env={**os.environ, "DJANGO_SETTINGS_MODULE": "maas.settings",
                               **env})


def test_identity_settings_come_from_the_environment():
    done = read_settings(ENV)

    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["MAAS_OIDC_SCOPES"] == "openid email profile groups"
    assert seen["MAAS_OIDC_GROUPS_CLAIM"] == ["memberOf", "groups"]
    assert seen["MAAS_OIDC_ROLES_CLAIMS"] == ["roles", "app_roles"]
    assert seen["MAAS_OIDC_GROUP_PATTERN"] == "maas-{tenant}-{role}"
    assert seen["MAAS_OIDC_STAFF_CLAIM"] == ["roles"]
    assert seen["MAAS_OIDC_USERNAME_CLAIMS"] == ["upn", "email"]
    assert seen["MAAS_OIDC_CLIENT_AUTH"] == "client_secret_basic"
    assert seen["MAAS_OIDC_INTROSPECTION_ENDPOINT"] == "https://sso.example/introspect"
    assert (seen["MAAS_OIDC_INTROSPECTION_CACHE"], seen["MAAS_OIDC_DISCOVERY_MIN_REFRESH"]) == (
        15, 5)
    assert seen["MAAS_OIDC_AUDIENCES"] == ["maas", "https://maas.example/api/"]
    assert (seen["MAAS_OIDC_INTROSPECTION_TIMEOUT"],
            seen["MAAS_OIDC_INTROSPECTION_CONCURRENCY"]) == (0.5, 3)


def test_an_unknown_client_authentication_stops_the_start_with_its_name():
    done = read_settings({"MAAS_OIDC_CLIENT_AUTH": "private_key_jwt"})

    assert done.returncode != 0
    assert "MAAS_OIDC_CLIENT_AUTH must be client_secret_post or client_secret_basic" in done.stderr
