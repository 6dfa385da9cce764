"""qdrouterd 1.19 delegating SASL to the auth service (authServicePlugin + listener saslPlugin):
messaging users and the router admin log in through it with their own passwords only. What
they may do is the space's vhost policy's (tests/workers/test_standard_space_e2e.py)."""
import json
import subprocess

import pytest
from proton import ConnectionException
from proton.utils import BlockingConnection

from dataplane import qdrouterd as qdrouterd_config
from tests.conftest import free_tcp_port, port_open, wait_for
from tests.qdrouterd import needs_qdrouterd
from workers.clients.qdr import Management

from .conftest import new_space, new_user

pytestmark = needs_qdrouterd


@pytest.fixture
def qdrouterd(auth_port, tmp_path):
    """A standalone qdrouterd whose only listener delegates SASL to the auth service."""
    port = free_tcp_port()
    config = [
        ["router", {"mode": "standalone", "id": "auth-test"}],
        ["authServicePlugin", {"name": "maas-auth", "host": "127.0.0.1", "port": str(auth_port)}],
        ["listener", {"host": "127.0.0.1", "port": str(port), "saslPlugin": "maas-auth",
                      "authenticatePeer": True, "saslMechanisms": "PLAIN"}],
    ]
    (tmp_path / "qdrouterd.json").write_text(json.dumps(config))
    with open(tmp_path / "qdrouterd.log", "wb") as log:
        proc = subprocess.Popen(qdrouterd_config.command(tmp_path / "qdrouterd.json"),
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: port_open(port) or proc.poll() is not None, 10, what="qdrouterd")
        assert proc.poll() is None, (tmp_path / "qdrouterd.log").read_text()
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def connect(port: int, user: str, password: str) -> BlockingConnection:
    return BlockingConnection(f"amqp://127.0.0.1:{port}", user=user, password=password,
                              allowed_mechs="PLAIN", allow_insecure_mechs=True, timeout=5)


def test_a_messaging_user_logs_in_through_qdrouterd_with_its_password_only(qdrouterd, tenant):
    space = new_space(tenant)
    new_user(space, "app", "app-password")
    connect(qdrouterd, f"app@{space.vhost}", "app-password").close()
    with pytest.raises(ConnectionException) as failure:
        connect(qdrouterd, f"app@{space.vhost}", "wrong-password")
    assert "amqp:unauthorized-access" in str(failure.value)


def test_the_router_admin_manages_qdrouterd_and_sees_users_by_their_sub(qdrouterd, tenant,
                                                                        settings):
    settings.MAAS_ROUTER_ADMIN_USER, settings.MAAS_ROUTER_ADMIN_PASSWORD = "admin", "mgmt-secret"
    space = new_space(tenant)
    new_user(space, "app", "app-password")
    app = connect(qdrouterd, "app", "app-password")
    mgmt = Management(f"amqp://127.0.0.1:{qdrouterd}", "admin", "mgmt-secret", timeout=5)
    users = {row["user"] for row in mgmt.query("org.apache.qpid.dispatch.connection", ["user"])}
    assert users == {"admin", f"app@{space.vhost}"}
    mgmt.close()
    app.close()
