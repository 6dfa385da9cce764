"""`manage.py run_authservice` serves the database's users as a process of its own, and
`runplatform` starts it whenever the router is enabled."""
import os
import subprocess
import sys
from urllib.parse import urlparse

from django.conf import settings

from maas.management.commands.runplatform import embedded_router_command, processes
from tests.conftest import free_tcp_port, port_open, wait_for

from .conftest import identity_of, login, new_space, new_user


def test_run_authservice_serves_messaging_users_and_the_admin(transactional_db, tenant):
    space = new_space(tenant)
    new_user(space, "app", "app-password")
    port = free_tcp_port()
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="maas.test_settings",
               DATABASE_URL=f"postgres://postgres@127.0.0.1:5432/"
                            f"{settings.DATABASES['default']['NAME']}",
               MAAS_ROUTER_ADMIN_USER="admin", MAAS_ROUTER_ADMIN_PASSWORD="mgmt-secret")
    proc = subprocess.Popen([sys.executable, "manage.py", "run_authservice", "--port", str(port)],
                            cwd=settings.BASE_DIR, env=env, stdout=subprocess.DEVNULL)
    try:
        wait_for(lambda: port_open(port), 20, what="run_authservice")
        conn = login(port, f"app@{space.vhost}", "app-password")
        assert identity_of(conn)[0]["sub"] == f"app@{space.vhost}"
        conn.close()
        conn = login(port, "admin", "mgmt-secret")
        assert identity_of(conn)[0]["sub"] == "admin"
        conn.close()
    finally:
        proc.terminate()
        proc.wait(10)


def test_runplatform_starts_the_auth_service_with_the_router(settings):
    settings.MAAS_ROUTER_ENABLED, settings.MAAS_RUN_EMBEDDED_ROUTER = True, False
    settings.MAAS_AUTH_SERVICE_HOST, settings.MAAS_AUTH_SERVICE_PORT = "127.0.0.2", 15676
    command = processes("127.0.0.1:8000")["authservice"]
    assert command[2:] == ["run_authservice", "--host", "127.0.0.2", "--port", "15676"]
    settings.MAAS_ROUTER_ENABLED = False
    assert "authservice" not in processes("127.0.0.1:8000")


def test_runplatform_points_the_embedded_router_at_the_auth_service(settings):
    settings.MAAS_AUTH_SERVICE_HOST, settings.MAAS_AUTH_SERVICE_PORT = "127.0.0.2", 15676
    command = embedded_router_command(urlparse("amqp://127.0.0.1:5675"))
    assert command[command.index("--auth-service") + 1] == "127.0.0.2:15676"
