"""`manage.py run_authservice` serves the database's users as a process of its own, and
`runplatform` starts it whenever the router is enabled."""
import os
import subprocess
import sys
from urllib.parse import urlparse

from django.conf import settings

from dataplane import qdrouterd
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
    # --tls-optional with no certificate there (Kubernetes without its Secret): plain
    missing = str(settings.BASE_DIR / "var" / "no-such-dir" / "tls.crt")
    proc = subprocess.Popen([sys.executable, "manage.py", "run_authservice", "--port", str(port),
                             "--tls-cert", missing, "--tls-key", missing, "--tls-optional"],
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


def test_runplatform_starts_the_auth_service_with_the_router(settings, tmp_path, monkeypatch):
    monkeypatch.delenv("QDROUTERD", raising=False)
    settings.MAAS_ROUTER_ENABLED, settings.MAAS_RUN_EMBEDDED_ROUTER = True, False
    # `auto` with no router started here (one of the operator's): plain, as it expects
    assert "--tls-cert" not in processes("127.0.0.1:8000")["authservice"]
    settings.MAAS_AUTH_SERVICE_TLS = "true"
    settings.MAAS_AUTH_SERVICE_HOST, settings.MAAS_AUTH_SERVICE_PORT = "127.0.0.2", 15676
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    settings.MAAS_AUTH_SERVICE_TLS_CERT, settings.MAAS_AUTH_SERVICE_TLS_KEY = cert, key
    command = processes("127.0.0.1:8000")["authservice"]
    # over TLS, with a certificate made for make run (tests/authservice/test_identity.py)
    assert command[2:] == ["run_authservice", "--host", "127.0.0.2", "--port", "15676",
                          "--tls-cert", cert, "--tls-key", key]
    assert os.path.exists(cert) and os.path.exists(key)
    settings.MAAS_AUTH_SERVICE_TLS_CERT = ""  # plain, as before
    command = processes("127.0.0.1:8000")["authservice"]
    assert command[2:] == ["run_authservice", "--host", "127.0.0.2", "--port", "15676"]
    # `auto`: TLS when this process starts the embedded router, plain with qdrouterd
    # (maas/settings.py says why); `true` asks for TLS with it too
    settings.MAAS_AUTH_SERVICE_TLS_CERT, settings.MAAS_AUTH_SERVICE_TLS = cert, "auto"
    settings.MAAS_RUN_EMBEDDED_ROUTER = True
    settings.MAAS_ROUTER_TLS_CERT = str(tmp_path / "router-cert.pem")
    settings.MAAS_ROUTER_TLS_KEY = str(tmp_path / "router-key.pem")
    procs = processes("127.0.0.1:8000")
    assert "--tls-cert" in procs["authservice"] and "--auth-service-ca" in procs["router"]
    monkeypatch.setenv("QDROUTERD", sys.executable)  # an executable: qdrouterd.binary()
    monkeypatch.setattr("maas.management.commands.runplatform.qdrouterd_command",
                        lambda router, mesh: ["qdrouterd"])  # its config is not looked at
    assert "--tls-cert" not in processes("127.0.0.1:8000")["authservice"]
    settings.MAAS_AUTH_SERVICE_TLS = "true"
    assert "--tls-cert" in processes("127.0.0.1:8000")["authservice"]
    settings.MAAS_ROUTER_ENABLED = False
    assert "authservice" not in processes("127.0.0.1:8000")


def test_runplatform_points_the_routers_at_the_auth_service_and_its_identity(settings,
                                                                            monkeypatch):
    monkeypatch.delenv("QDROUTERD", raising=False)
    settings.MAAS_RUN_EMBEDDED_ROUTER = True
    settings.MAAS_AUTH_SERVICE_HOST, settings.MAAS_AUTH_SERVICE_PORT = "127.0.0.2", 15676
    settings.MAAS_AUTH_SERVICE_TLS_CERT = settings.MAAS_AUTH_SERVICE_CA = "/etc/auth/ca.pem"
    command = embedded_router_command(urlparse("amqp://127.0.0.1:5675"))
    assert command[command.index("--auth-service") + 1] == "127.0.0.2:15676"
    assert command[command.index("--auth-service-ca") + 1] == "/etc/auth/ca.pem"
    where = qdrouterd.Listeners(host="h", amqp_port=1, management_host="h", management_port=2,
                                admin_user="admin", auth_host="127.0.0.2", auth_port=15676,
                                auth_ca="/etc/auth/ca.pem")
    config = qdrouterd.router_config("r", where)
    assert ["sslProfile", {"name": "auth-service", "caCertFile": "/etc/auth/ca.pem",
                           "protocols": "TLSv1.2 TLSv1.3"}] in config
    (plugin,) = [attrs for kind, attrs in config if kind == "authServicePlugin"]
    assert plugin["sslProfile"] == "auth-service"
    settings.MAAS_AUTH_SERVICE_TLS_CERT = ""
    assert "--auth-service-ca" not in embedded_router_command(urlparse("amqp://127.0.0.1:5675"))
