"""SASL relayed to the auth service (the real server over the tests' fixed users), vhost
selection from its identity, and qdrouterd-style vhost policy."""

import socket
import struct
import time

import pytest
from proton import ConnectionException
from proton.utils import BlockingConnection, LinkDetached

from dataplane.router.sasl_relay import SERVICE_TIMEOUT

from .conftest import (
    ADDRESS,
    ADMIN_PASSWORD,
    VHOST,
    FixedAuthService,
    RouterProcess,
    add_tenant,
)

CONNECTION = "org.apache.qpid.dispatch.connection"

OPEN = {"users": "alice", "sources": "*", "targets": "*", "allowDynamicSource": True}
READ_ONLY = {"users": "rita", "sources": "*", "targets": "", "maxReceivers": 1}


@pytest.fixture(scope="module", autouse=True)
def tenants(mgmt):
    add_tenant(mgmt, "red", {"alice": "alice-pw", "rita": "rita-pw"},
               {"writers": OPEN, "readers": READ_ONLY}, maxConnections=4)
    add_tenant(mgmt, "blue", {"bob": "bob-pw"},
               {"all": {"users": "bob", "sources": "*", "targets": "*"}}, maxConnections=1)
    mgmt.create(ADDRESS, "red-a", prefix="red/a")
    mgmt.create(ADDRESS, "blue-a", prefix="blue/a")


def test_right_password_connects_and_attaches(router):
    conn = router.connect("alice", "alice-pw", vhost="red")
    sender = conn.create_sender("a")
    assert sender.link.remote_target.address == "a"
    conn.close()


def test_wrong_password_is_refused(router):
    with pytest.raises(ConnectionException, match="(?i)auth"):
        router.connect("alice", "wrong", vhost="red")


def test_the_management_admin_cannot_log_in_on_the_client_listener(router):
    # Internal users belong to the management listener only (docs/security.md).
    for vhost in (None, "red"):
        with pytest.raises(ConnectionException, match="(?i)auth"):
            router.connect("admin", ADMIN_PASSWORD, vhost=vhost)


def test_anonymous_is_refused_on_client_listener(router):
    with pytest.raises(ConnectionException):
        BlockingConnection(f"amqp://127.0.0.1:{router.amqp_port}", allowed_mechs="ANONYMOUS",
                           timeout=5)


def test_vhost_from_username_suffix(router):
    conn = router.connect("alice@red", "alice-pw")
    conn.create_sender("a")
    conn.close()


def test_user_of_another_vhost_is_refused(router):
    with pytest.raises(ConnectionException, match="unauthorized-access"):
        router.connect("alice", "alice-pw", vhost="blue")


def test_user_without_send_permission_cannot_attach_sender(router):
    conn = router.connect("rita", "rita-pw", vhost="red")
    with pytest.raises(LinkDetached, match="unauthorized-access"):
        conn.create_sender("a")
    conn.close()


def test_unconfigured_address_is_not_found(router):
    conn = router.connect("alice", "alice-pw", vhost="red")
    with pytest.raises(LinkDetached, match="not-found"):
        conn.create_sender("nowhere")
    conn.close()


def test_address_of_another_vhost_is_not_reachable(router):
    # `blue/a` exists, but alice's `a` means `red/a` and `blue/a` means `red/blue/a`
    conn = router.connect("alice", "alice-pw", vhost="red")
    with pytest.raises(LinkDetached, match="not-found"):
        conn.create_sender("blue/a")
    conn.close()


def test_receiver_limit_is_resource_limit_exceeded(router):
    conn = router.connect("rita", "rita-pw", vhost="red")
    conn.create_receiver("a", name="first")
    with pytest.raises(LinkDetached, match="resource-limit-exceeded"):
        conn.create_receiver("a", name="second")
    conn.close()


def test_connection_limit_is_resource_limit_exceeded(router):
    first = router.connect("bob", "bob-pw", vhost="blue")
    with pytest.raises(ConnectionException, match="resource-limit-exceeded"):
        router.connect("bob", "bob-pw", vhost="blue")
    first.close()


def test_the_connection_s_user_is_the_auth_service_s_identity(router, mgmt):
    conn = router.connect("alice", "alice-pw", vhost="red")
    rows = mgmt.query(CONNECTION, ["user", "tenant", "sasl"])
    assert {"user": "alice@red", "tenant": "red", "sasl": "PLAIN"} in rows
    conn.close()


def test_a_client_without_sasl_is_refused_and_the_router_serves_on(router):
    with socket.create_connection(("127.0.0.1", router.amqp_port), timeout=5) as sock:
        sock.sendall(b"AMQP\x00\x01\x00\x00")
        assert sock.recv(8) == b"AMQP\x03\x01\x00\x00"
        assert sock.recv(8) == b""  # closed
    router.connect("alice", "alice-pw", vhost="red").close()


def test_an_oversized_sasl_frame_is_dropped(router):
    with socket.create_connection(("127.0.0.1", router.amqp_port), timeout=5) as sock:
        sock.sendall(b"AMQP\x03\x01\x00\x00" + struct.pack(">IBBH", 1 << 20, 2, 1, 0))
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
    assert received.startswith(b"AMQP\x03\x01\x00\x00")


def test_without_the_auth_service_clients_get_sys_temp_and_the_router_serves_on():
    auth = FixedAuthService()
    port = auth.port
    router = RouterProcess(auth_port=port)
    router.start()
    try:
        mgmt = router.management()
        mgmt.create(VHOST, "red", hostname="red", groups={"writers": OPEN})
        mgmt.close()
        router.connect("alice", "alice-pw", vhost="red").close()
        auth.stop()
        with pytest.raises(ConnectionException, match="(?i)auth"):
            router.connect("alice", "alice-pw", vhost="red")
        auth = FixedAuthService(port=port)
        router.connect("alice", "alice-pw", vhost="red").close()
    finally:
        router.stop()
        auth.stop()


@pytest.mark.slow  # several seconds of waiting: not for the inner loop
def test_a_silent_auth_service_times_out_into_a_refusal():
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (backlog), never answers
    router = RouterProcess(auth_port=silent.getsockname()[1])
    router.start()
    try:
        started = time.monotonic()
        with pytest.raises(ConnectionException, match="(?i)auth"):
            BlockingConnection(f"amqp://127.0.0.1:{router.amqp_port}", user="alice",
                               password="alice-pw", allowed_mechs="PLAIN",
                               allow_insecure_mechs=True, timeout=15)
        assert time.monotonic() - started < SERVICE_TIMEOUT + 3
    finally:
        router.stop()
        silent.close()
