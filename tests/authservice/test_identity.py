"""A router talks only to the auth service it expects: given the CA that certifies the service
(`--auth-service-ca`, qdrouterd's authServicePlugin sslProfile), both routers speak TLS to it
and refuse every login relayed to anything else on that port (a process that took it while the
service could not start), even one that answers SASL exactly like the real service."""
import ssl
import threading

import pytest
from proton import ConnectionException

from dataplane import qdrouterd as qdrouterd_config
from dataplane.authservice.server import AuthServer
from maas import bindings
from tests.qdrouterd import SKIP_REASON, QdrouterdProcess
from tests.router.conftest import ADMIN_PASSWORD, ADMIN_USER, RouterProcess
from workers.agents.router.certificates import ensure_self_signed
from workers.clients.qdr import Management, RouterUnreachable

pytestmark = pytest.mark.django_db(transaction=True)


class Service:
    """The real auth service in a thread, over TLS with the given certificate, or plain."""

    def __init__(self, cert: str | None = None, key: str | None = None):
        context = None
        if cert:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(cert, key)
        self.server = AuthServer(("127.0.0.1", 0), bindings.verify, ssl_context=context,
                                 handshake_timeout=3)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def certificates(tmp_path):
    """The service's certificate, and an impostor's for the same host name."""
    made = {}
    for who in ("service", "impostor"):
        cert, key = str(tmp_path / f"{who}.pem"), str(tmp_path / f"{who}-key.pem")
        ensure_self_signed(cert, key, "127.0.0.1")
        made[who] = (cert, key)
    return made


def _router(kind: str, auth_port: int, ca: str):
    if kind == "embedded":
        return RouterProcess(extra_args=["--auth-service-ca", ca], auth_port=auth_port)
    if qdrouterd_config.binary() is None:
        pytest.skip(SKIP_REASON)
    return QdrouterdProcess(auth_port, auth_ca=ca)


def _admin_logs_in(router) -> bool:
    try:
        Management(f"amqp://127.0.0.1:{router.mgmt_port}", ADMIN_USER, ADMIN_PASSWORD,
                   timeout=5).close()
        return True
    except (RouterUnreachable, ConnectionException):
        return False


@pytest.mark.parametrize("kind", ["embedded", pytest.param("qdrouterd", marks=pytest.mark.slow)])
def test_a_router_relays_logins_only_to_the_auth_service_its_ca_certifies(
        kind, certificates, settings):
    settings.MAAS_ROUTER_ADMIN_USER, settings.MAAS_ROUTER_ADMIN_PASSWORD = (ADMIN_USER,
                                                                            ADMIN_PASSWORD)
    service = Service(*certificates["service"])
    router = _router(kind, service.port, certificates["service"][0])
    router.start()
    try:
        assert _admin_logs_in(router)
        # the service is gone and others answer on its port: an impostor with its own
        # certificate, then a plain one; both would take the admin's password
        service.stop()
        for impostor in (Service(*certificates["impostor"]), Service()):
            router.auth_port = impostor.port  # what the router is started with
            router.restart()
            try:
                assert not _admin_logs_in(router)
            finally:
                impostor.stop()
        service = Service(*certificates["service"])
        router.auth_port = service.port
        router.restart()
        assert _admin_logs_in(router)
    finally:
        router.stop()
        service.stop()
