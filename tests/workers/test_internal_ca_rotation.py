"""Rotating the internal CA of one machine (`rotate_secrets --internal-ca`, MAAS_INTERNAL_TLS_DIR):
a new CA signs from then on while the old one stays trusted, each party's certificate is signed
again at its next start, and the old CA leaves the trust bundle only once nothing it signed is
left, RabbitMQ's certificate as it presents it included. Real TLS handshakes decide trust."""
import shutil
import socket
import ssl
import threading

import pytest
from django.core.management import CommandError, call_command

from workers import pki
from workers.agents.router.certificates import ensure_internal_certificates


def handshake(ca_bundle: str, cert: str, key: str) -> bool:
    """Whether a client trusting `ca_bundle` accepts a server presenting `cert`."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=ca_bundle)
    client_ctx.check_hostname = False
    left, right = socket.socketpair()
    served = threading.Thread(target=_serve, args=(server_ctx, right), daemon=True)
    served.start()
    try:
        with client_ctx.wrap_socket(left) as tls:
            tls.settimeout(5)
            return tls.recv(1) == b"k"
    except ssl.SSLCertVerificationError:
        return False
    finally:
        served.join(5)


def _serve(ctx: ssl.SSLContext, sock: socket.socket) -> None:
    try:
        with ctx.wrap_socket(sock, server_side=True) as tls:
            tls.sendall(b"k")
    except (ssl.SSLError, OSError):
        pass  # the client refused the certificate


def test_a_rotation_keeps_the_old_ca_trusted_until_nothing_it_signed_is_left(settings, tmp_path):
    where = tmp_path / "internal-tls"
    settings.MAAS_INTERNAL_TLS_DIR = str(where)
    _, old_cert, old_key = ensure_internal_certificates(str(where), ["relay"])["relay"]
    shutil.copy(old_cert, tmp_path / "old.pem")
    shutil.copy(old_key, tmp_path / "old-key.pem")
    first_ca = (where / "ca.pem").read_text()

    call_command("rotate_secrets", "--internal-ca")
    bundle = pki.certificates((where / "ca.pem").read_text())
    assert len(bundle) == 2 and bundle[1] == first_ca and bundle[0] != first_ca
    with pytest.raises(CommandError, match="under way"):
        call_command("rotate_secrets", "--internal-ca")
    # a party not yet signed again is still trusted
    assert handshake(str(where / "ca.pem"), str(tmp_path / "old.pem"),
                     str(tmp_path / "old-key.pem"))
    # RabbitMQ (this machine's, signed by the checkout's CA) and the relay are named
    with pytest.raises(CommandError, match=r"relay\.pem.*RabbitMQ"):
        call_command("rotate_secrets", "--internal-ca-finish")

    # the relay's next start signs it again, by the new CA
    ensure_internal_certificates(str(where), ["relay"])
    assert pki.signed_by((where / "relay.pem").read_text(), bundle[0])
    settings.RABBITMQ_AMQPS_PORT = 0  # as if RabbitMQ had been signed again (services.sh)
    call_command("rotate_secrets", "--internal-ca-finish")
    assert pki.certificates((where / "ca.pem").read_text()) == [bundle[0]]
    assert handshake(str(where / "ca.pem"), str(where / "relay.pem"), str(where / "relay-key.pem"))
    assert not handshake(str(where / "ca.pem"), str(tmp_path / "old.pem"),
                         str(tmp_path / "old-key.pem"))
    with pytest.raises(CommandError, match="no rotation"):
        call_command("rotate_secrets", "--internal-ca-finish")
