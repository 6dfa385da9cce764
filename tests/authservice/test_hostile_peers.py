"""The auth service faces the network: garbage, oversized or malformed frames, other mechanisms,
an authzid naming someone else and silent peers are dropped cleanly, and the next login works."""
import socket
import struct
import time

from proton import Data

from dataplane.authservice import sasl

from .conftest import HANDSHAKE_TIMEOUT, identity_of, login, new_space, new_user


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=HANDSHAKE_TIMEOUT + 5)


def until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def sasl_init(mechanism: str, response: bytes) -> bytes:
    data = Data()
    data.put_described()
    data.enter()
    data.put_ulong(sasl.INIT)
    data.put_list()
    data.enter()
    data.put_symbol(mechanism)
    data.put_binary(response)
    data.exit()
    data.exit()
    return sasl.frame(sasl.SASL_FRAME, bytes(data.encode()))


def frames(received: bytes) -> list[sasl.Performative]:
    """The SASL frames the server sent after its header."""
    assert received.startswith(sasl.SASL_HEADER)
    out, rest = [], received[8:]
    while rest:
        size = struct.unpack(">I", rest[:4])[0]
        out.append(sasl.decode(rest[8:size]))
        rest = rest[size:]
    return out


def outcome_code(received: bytes) -> int:
    sent = frames(received)
    assert [f.code for f in sent] == [sasl.MECHANISMS, sasl.OUTCOME]
    return sent[-1].field(0)


def still_serving(port: int, space) -> None:
    conn = login(port, f"app@{space.vhost}", "app-password")
    assert identity_of(conn)[0]["sub"] == f"app@{space.vhost}"
    conn.close()


def test_garbage_gets_the_sasl_header_and_a_disconnect(auth_port, tenant):
    space = new_space(tenant)
    new_user(space, "app", "app-password")
    with connect(auth_port) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert until_closed(sock) == sasl.SASL_HEADER
    still_serving(auth_port, space)


def test_a_client_without_sasl_is_told_to_use_it(auth_port):
    with connect(auth_port) as sock:
        sock.sendall(sasl.AMQP_HEADER)
        assert until_closed(sock) == sasl.SASL_HEADER


def test_an_oversized_frame_is_refused_before_it_is_read(auth_port, tenant):
    space = new_space(tenant)
    new_user(space, "app", "app-password")
    with connect(auth_port) as sock:
        sock.sendall(sasl.SASL_HEADER + struct.pack(">IBBH", 1 << 20, 2, sasl.SASL_FRAME, 0))
        started = time.monotonic()
        received = until_closed(sock)
        assert time.monotonic() - started < HANDSHAKE_TIMEOUT / 2  # dropped, not timed out
    assert received.startswith(sasl.SASL_HEADER)
    still_serving(auth_port, space)


def deeply_nested(depth: int) -> bytes:
    """sasl-init whose list holds a list that holds a list ... (list32 encodings)."""
    value = b"\x45"  # the empty list
    for _ in range(depth):
        value = b"\xd0" + struct.pack(">II", len(value) + 4, 1) + value
    return b"\x00\x53\x41" + value


def test_a_malformed_frame_body_is_dropped(auth_port, tenant):
    space = new_space(tenant)
    new_user(space, "app", "app-password")
    for body in (b"\x00\x53\x41\xc0\x10\x05", b"\xff" * 40, b"\x00\x53\x41\x45" + b"junk",
                 deeply_nested(7000)):
        with connect(auth_port) as sock:
            sock.sendall(sasl.SASL_HEADER + sasl.frame(sasl.SASL_FRAME, body))
            received = until_closed(sock)
        assert [f.code for f in frames(received)] == [sasl.MECHANISMS]  # and no outcome
    still_serving(auth_port, space)


def test_another_mechanism_is_refused(auth_port):
    with connect(auth_port) as sock:
        sock.sendall(sasl.SASL_HEADER + sasl_init("ANONYMOUS", b"anonymous"))
        assert outcome_code(until_closed(sock)) == sasl.AUTH


def test_acting_for_another_user_is_refused(auth_port, tenant):
    space = new_space(tenant)
    new_user(space, "app", "app-password")
    new_user(space, "boss", "boss-password")
    plain = f"boss@{space.vhost}\0app@{space.vhost}\0app-password".encode()
    with connect(auth_port) as sock:
        sock.sendall(sasl.SASL_HEADER + sasl_init("PLAIN", plain))
        assert outcome_code(until_closed(sock)) == sasl.AUTH


def test_a_malformed_plain_message_is_refused(auth_port):
    for bad in (b"\0app\0", b"app-password", b"\0\0\0", b"\0app\0\xff\xfe"):
        with connect(auth_port) as sock:
            sock.sendall(sasl.SASL_HEADER + sasl_init("PLAIN", bad))
            assert outcome_code(until_closed(sock)) == sasl.AUTH


def test_a_silent_client_is_dropped_after_the_handshake_timeout(auth_port, tenant):
    space = new_space(tenant)
    new_user(space, "app", "app-password")
    with connect(auth_port) as sock:
        sock.sendall(sasl.SASL_HEADER[:4])
        started = time.monotonic()
        assert until_closed(sock) == b""
        assert HANDSHAKE_TIMEOUT - 0.5 < time.monotonic() - started < HANDSHAKE_TIMEOUT + 2
    still_serving(auth_port, space)
