"""qdrouterd 1.19 beside the tests: the binary `QDROUTERD` names, configured by the project
(dataplane/qdrouterd.py) on free ports, with the MaaS auth service and the vhost relay it needs.

Tests that use it are skipped, with the reason, where `QDROUTERD` is not set; nothing of
qdrouterd is in this repository.
"""
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from dataplane import qdrouterd
from tests.router.conftest import ROOT, RouterProcess, free_port, terminate, wait_port

SKIP_REASON = "QDROUTERD does not name a qdrouterd 1.19 build (see docs/router.md)"
needs_qdrouterd = pytest.mark.skipif(qdrouterd.binary() is None, reason=SKIP_REASON)


def fake_binary(tmp_path, monkeypatch) -> Path:
    """An executable `QDROUTERD` names: enough for the platform to choose qdrouterd (and write
    its configuration) where no test runs it."""
    binary = tmp_path / "qdrouterd"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv("QDROUTERD", str(binary))
    return binary


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
    """The vhost relay (`python -m dataplane.vhost_relay`) in front of a broker (the settings'
    by default: the test node), as runplatform starts it for qdrouterd: plain facing the
    router, reaching the broker over TLS where the broker has its TLS listener."""

    def __init__(self, endpoint=None):
        from config_service.brokers import shared_broker
        from maas.management.commands.runplatform import relay_to_broker_args, router_facing_args

        endpoint = endpoint or shared_broker()
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dataplane.vhost_relay",
             *router_facing_args("127.0.0.1", self.port, endpoint, tls=False),
             *relay_to_broker_args(endpoint, "amqp")], cwd=ROOT,
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
                 auth_ca: str | None = None, router_id: str = "maas-test",
                 ports: tuple[int, int, int] | None = None,
                 inter_router_port: int | None = None, peers: tuple = (),
                 mesh_tls: qdrouterd.MeshTls | None = None):  # not RouterProcess.__init__
        # (AMQP, management, metrics): free ports unless given (a mesh's, by its layout)
        self.amqp_port, self.mgmt_port, self.metrics_port = ports or (
            free_port(), free_port(), free_port())
        self.amqps_port = None
        self.router_id = router_id
        # A router of a mesh (interior): its inter-router listener, its peers' and the TLS.
        self.inter_router_port, self.peers, self.mesh_tls = inter_router_port, peers, mesh_tls
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
            auth_ca=self.auth_ca, mode="interior" if self.inter_router_port else "standalone",
            inter_router_port=self.inter_router_port, peers=self.peers, mesh_tls=self.mesh_tls)
        path = qdrouterd.write_config(self.dir / "qdrouterd.json", self.router_id, where)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(qdrouterd.command(path), stdout=log, stderr=log,
                                         env=dict(os.environ))
        wait_port(self.amqp_port)
        wait_port(self.mgmt_port)


def free_block(size: int) -> int:
    """The first of `size` consecutive ports free now (a mesh's layout,
    config_service.routers: MAAS_ROUTER_MESH_PORT_BASE + 10 (k-1) + 0..4)."""
    for _ in range(50):
        base = random.randrange(20000, 30000 - size)
        sockets = []
        try:
            for port in range(base, base + size):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError(f"no {size} free ports in a row")


class Mesh:
    """`n` qdrouterd interior routers meshed over mutual TLS, laid out on the ports
    config_service.routers gives MAAS_ROUTER_MESH = n (router 1's client ports free ones, its
    inter-router listener on the base), so that the platform's settings find each: `settings`
    points them there. Router k connects to routers 1..k-1, as `runplatform` starts them."""

    def __init__(self, n: int, auth_port: int, tls_dir: str, tenant_vhost: str | None = None,
                 linked: bool = True):
        """`linked`: each router's connectors to the routers before it are in its static
        configuration (as runplatform writes them); else the router agent makes them, as
        for a space's own routers on Kubernetes (RouterEndpoint.peers)."""
        from workers.agents.router.certificates import ensure_internal_certificates

        self.base = free_block(10 * n)
        ids = [f"maas-router-{k}" for k in range(1, n + 1)]
        certs = ensure_internal_certificates(tls_dir, ids)
        self.routers: list[QdrouterdProcess] = []
        for k, router_id in enumerate(ids, 1):
            at = self.base + 10 * (k - 1)
            ports = None if k == 1 else (at, at + 2, at + 3)
            self.routers.append(QdrouterdProcess(
                auth_port, tenant_vhost=tenant_vhost, router_id=router_id, ports=ports,
                inter_router_port=self.base if k == 1 else at + 4,
                peers=tuple(("127.0.0.1", r.inter_router_port) for r in self.routers)
                if linked else (),
                mesh_tls=qdrouterd.MeshTls(*certs[router_id])))

    def start(self) -> None:
        for router in self.routers:
            router.start()

    def stop(self) -> None:
        for router in self.routers:
            router.stop()

    def settings(self, settings) -> None:
        first = self.routers[0]
        settings.MAAS_ROUTER_MESH = len(self.routers)
        settings.MAAS_ROUTER_MESH_PORT_BASE = self.base
        settings.MAAS_ROUTER_HOST = "127.0.0.1"
        settings.MAAS_ROUTER_MANAGEMENT_URL = f"amqp://127.0.0.1:{first.mgmt_port}"
        settings.MAAS_ROUTER_AMQP_PORT = first.amqp_port
