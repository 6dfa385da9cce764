"""The router's management listener over TLS (`make run`'s `amqps://` MAAS_ROUTER_MANAGEMENT_URL):
the agents' client checks the platform's certificate, so the router admin's password never
crosses in clear text; a plain connection and a certificate the client does not trust are
refused. The embedded router for real; qdrouterd's configuration as runplatform writes it."""
import pytest
from proton import ConnectionException
from proton.utils import BlockingConnection

from dataplane import qdrouterd
from tests.storage.relays import self_signed
from workers.clients.qdr import Management, RouterUnreachable

from .conftest import ADMIN_PASSWORD, ADMIN_USER, RouterProcess

ROUTER = "org.apache.qpid.dispatch.router"


@pytest.fixture(scope="module")
def tls_router(tmp_path_factory):
    cert, key = self_signed(tmp_path_factory.mktemp("mgmt-tls"))
    router = RouterProcess(extra_args=["--tls-cert", cert, "--tls-key", key, "--management-tls"])
    router.start()
    yield router, cert
    router.stop()


def test_the_agents_client_manages_the_router_over_tls(tls_router):
    router, cert = tls_router
    mgmt = Management(f"amqps://127.0.0.1:{router.mgmt_port}", ADMIN_USER, ADMIN_PASSWORD,
                      ca=cert)
    try:
        assert mgmt.read(ROUTER, "self")["mode"] == "standalone"
    finally:
        mgmt.close()


def test_plain_text_and_an_untrusted_certificate_are_refused(tls_router, tmp_path):
    router, _ = tls_router
    with pytest.raises(ConnectionException):
        BlockingConnection(f"amqp://127.0.0.1:{router.mgmt_port}", user=ADMIN_USER,
                           password=ADMIN_PASSWORD, allowed_mechs="PLAIN",
                           allow_insecure_mechs=True, timeout=5)
    other, _ = self_signed(tmp_path)
    with pytest.raises(RouterUnreachable):
        Management(f"amqps://127.0.0.1:{router.mgmt_port}", ADMIN_USER, ADMIN_PASSWORD,
                   ca=other, timeout=5)
    with pytest.raises(RouterUnreachable, match="cannot use"):  # no CA file: said, not a crash
        Management(f"amqps://127.0.0.1:{router.mgmt_port}", ADMIN_USER, ADMIN_PASSWORD,
                   ca=str(tmp_path / "missing.pem"), timeout=5)


def test_qdrouterds_management_listener_requires_tls_when_asked():
    where = qdrouterd.Listeners(
        host="127.0.0.1", amqp_port=5673, amqps_port=5674, tls_cert="c.pem", tls_key="k.pem",
        management_host="127.0.0.1", management_port=5675, admin_user="admin",
        auth_host="127.0.0.1", auth_port=5676, management_tls=True)
    config = dict((e["name"], e) for kind, e in qdrouterd.router_config("r", where)
                  if kind == "listener")
    assert config["management"]["sslProfile"] == "tls"
    assert config["management"]["requireSsl"] is True
    with pytest.raises(ValueError):
        qdrouterd.router_config("r", qdrouterd.Listeners(
            host="127.0.0.1", amqp_port=5673, management_host="127.0.0.1",
            management_port=5675, admin_user="admin", auth_host="127.0.0.1", auth_port=5676,
            management_tls=True))
