"""The relays a brokered space's tenants connect through, as real processes in front of the
test node: `brokered-amqp` (AMQP and AMQPS, bare address names) and `mqtt` with MQTTS, both
with a self-signed certificate for 127.0.0.1 and localhost."""
import os
import subprocess
import sys
from pathlib import Path

from tests.router.conftest import ROOT, free_port, wait_port
from tests.storage.clients import API_PASSWORD, API_URL, API_USER
from workers.agents.router.certificates import ensure_self_signed


def self_signed(where: Path) -> tuple[str, str]:
    """(certificate, key) files of a new self-signed certificate in `where`."""
    cert, key = str(where / "tls.crt"), str(where / "tls.key")
    ensure_self_signed(cert, key, "127.0.0.1")
    return cert, key


class Front:
    """`python -m dataplane.vhost_relay --protocol <protocol>`, plain and TLS; `managed`:
    `manage.py run_vhost_relay` on the test database instead (spaces' certificates looked up
    there, as on Kubernetes)."""

    def __init__(self, protocol: str, broker_port: int, cert: str, key: str, *options: str,
                 managed: bool = False):
        self.port, self.tls_port = free_port(), free_port()
        env = dict(os.environ, PYTHONPATH=str(ROOT), RABBITMQ_API_USER=API_USER,
                   RABBITMQ_API_PASSWORD=API_PASSWORD)
        head = [sys.executable, "-m", "dataplane.vhost_relay"]
        if managed:
            from django.conf import settings

            db = settings.DATABASES["default"]
            env["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
            head = [sys.executable, "manage.py", "run_vhost_relay"]
        self.proc = subprocess.Popen(
            [*head, "--protocol", protocol,
             "--listen", f"127.0.0.1:{self.port}", "--tls-listen", f"127.0.0.1:{self.tls_port}",
             "--tls-cert", cert, "--tls-key", key, "--broker", f"127.0.0.1:{broker_port}",
             "--api-url", API_URL, "--log-level", "WARNING", *options],
            cwd=ROOT, env=env)
        wait_port(self.port, process=self.proc)
        wait_port(self.tls_port, process=self.proc)

    def stop(self) -> None:
        alive = self.proc.poll() is None
        self.proc.terminate()
        self.proc.wait(5)
        assert alive, "the relay died during the tests"
