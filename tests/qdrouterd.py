"""qdrouterd 1.19 beside the tests: the binary `QDROUTERD` names, configured by the project
(dataplane/qdrouterd.py) on free ports, with the MaaS auth service and the vhost relay it needs.

Tests that use it are skipped, with the reason, where `QDROUTERD` is not set; nothing of
qdrouterd is in this repository.
"""
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from dataplane import qdrouterd
from tests import broker
from tests.router.conftest import ROOT, RouterProcess, free_port, terminate, wait_port

SKIP_REASON = "QDROUTERD does not name a qdrouterd 1.19 build (see docs/router.md)"
needs_qdrouterd = pytest.mark.skipif(qdrouterd.binary() is None, reason=SKIP_REASON)


class AuthService:
    """The MaaS auth service in a thread of the test process, so it reads the test database
    (the tests that use it commit their data: transactional)."""

    def __init__(self):
        from dataplane.authservice.server import AuthServer
        from maas import bindings

        self.port = free_port()
        self.server = AuthServer(("127.0.0.1", self.port), bindings.verify)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class VhostRelay:
    """The vhost relay (`python -m dataplane.vhost_relay`) in front of the local RabbitMQ."""

    def __init__(self, broker_host: str = "127.0.0.1", broker_port: int = broker.AMQP_PORT):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dataplane.vhost_relay", "--listen", f"127.0.0.1:{self.port}",
             "--broker", f"{broker_host}:{broker_port}"], cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)))
        wait_port(self.port)

    def stop(self) -> None:
        terminate(self.proc)


class QdrouterdProcess(RouterProcess):
    """qdrouterd on free ports, restartable on the same ports: a RouterProcess (stop, restart,
    connect), so a test can take either."""

    kind = "qdrouterd"

    def __init__(self, auth_port: int, admin_user: str = "admin",
                 tenant_vhost: str | None = None,
                 auth_ca: str | None = None):  # not RouterProcess.__init__
        self.amqp_port = free_port()
        self.amqps_port = None
        self.mgmt_port = free_port()
        self.metrics_port = free_port()
        self.auth_port, self.admin_user = auth_port, admin_user
        # A router serving one space, as on Kubernetes (Listeners.tenant_vhost).
        self.tenant_vhost = tenant_vhost
        self.auth_ca = auth_ca  # TLS to the auth service, verified against it
        self.dir = Path(tempfile.mkdtemp(prefix="qdrouterd-"))
        self.log = self.dir / "qdrouterd.log"
        self.proc = None

    def start(self) -> None:
        where = qdrouterd.Listeners(
            host="127.0.0.1", amqp_port=self.amqp_port, management_host="127.0.0.1",
            management_port=self.mgmt_port, admin_user=self.admin_user,
            auth_host="127.0.0.1", auth_port=self.auth_port, metrics_host="127.0.0.1",
            metrics_port=self.metrics_port, tenant_vhost=self.tenant_vhost,
            auth_ca=self.auth_ca)
        path = qdrouterd.write_config(self.dir / "qdrouterd.json", "maas-test", where)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(qdrouterd.command(path), stdout=log, stderr=log,
                                         env=dict(os.environ))
        wait_port(self.amqp_port)
        wait_port(self.mgmt_port)
