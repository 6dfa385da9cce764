"""The auth service faces the network: garbage, oversized or malformed frames, other mechanisms,
an authzid naming someone else and silent peers are dropped cleanly, and the next login works;
hundreds of silent peers hold no thread, logins at once check on a few threads (a database
connection each), and a refused name waits before it is checked again."""
import socket
import struct
import threading
import time

from proton import Data

from dataplane.authservice import sasl
from dataplane.authservice.server import AuthServer
from maas import bindings
from tests.conftest import wait_for

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


def test_many_silent_peers_hold_no_thread_and_the_next_login_is_served(auth_port, tenant):
    space = new_space(tenant)
    new_user(space, "app", "app-password")
    # More than the 256 threads the service once had, one per peer.
    peers = [connect(auth_port) for _ in range(300)]
    try:
        for sock in peers[::2]:
            sock.sendall(sasl.SASL_HEADER)
        still_serving(auth_port, space)
    finally:
        for sock in peers:
            sock.close()


class Recorded:
    """The database verifier, noting the threads it ran on (each holds its own connection)."""

    def __init__(self):
        self.threads: set = set()

    def __call__(self, login: str, password: str):
        self.threads.add(threading.get_ident())
        return bindings.verify(login, password)


def test_logins_at_once_check_on_at_most_the_workers_threads(transactional_db, tenant):
    space = new_space(tenant)
    new_user(space, "app", "app-password")
    recorded = Recorded()
    server = AuthServer(("127.0.0.1", 0), recorded, handshake_timeout=HANDSHAKE_TIMEOUT,
                        workers=2)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    outcomes = []

    def one():
        try:
            conn = login(port, f"app@{space.vhost}", "app-password")
            outcomes.append(identity_of(conn)[0]["sub"])
            conn.close()
        except Exception as exc:  # counted below: every login must get through
            outcomes.append(repr(exc))

    clients = [threading.Thread(target=one) for _ in range(20)]
    try:
        for client in clients:
            client.start()
        for client in clients:
            client.join(30)
    finally:
        server.shutdown()
        server.server_close()
    assert outcomes == [f"app@{space.vhost}"] * 20
    assert 1 <= len(recorded.threads) <= 2


def test_a_refused_name_is_checked_again_only_after_a_delay(auth_port, tenant):
    space = new_space(tenant)
    new_user(space, "app", "app-password")
    name = f"app@{space.vhost}"
    plain = f"\0{name}\0wrong".encode()
    with connect(auth_port) as sock:
        sock.sendall(sasl.SASL_HEADER + sasl_init("PLAIN", plain))
        assert outcome_code(until_closed(sock)) == sasl.AUTH
    started = time.monotonic()
    conn = login(auth_port, name, "app-password")  # waits the first delay, then gets in
    assert time.monotonic() - started >= 0.2
    conn.close()
    started = time.monotonic()
    still_serving(auth_port, space)  # a success forgot the refusals: no delay now
    assert time.monotonic() - started < 0.2


class SlowForGhosts:
    """The database verifier, but a login of a `ghost-` name (a flood of names that do not
    exist) takes until the test lets one through: a slow database, held by the flood."""

    def __init__(self):
        self.gate = threading.Semaphore(0)
        self.entered = threading.Semaphore(0)
        self.order: list[str] = []  # the logins in the order the verifier got them

    def __call__(self, login: str, password: str):
        self.order.append(login)
        if login.startswith("ghost-"):
            self.entered.release()
            self.gate.acquire(timeout=20)
            return None
        return bindings.verify(login, password)


def test_a_login_accepted_before_goes_ahead_of_a_flood_of_unknown_names(transactional_db,
                                                                         tenant):
    space = new_space(tenant)
    new_user(space, "app", "app-password")
    verifier = SlowForGhosts()
    server = AuthServer(("127.0.0.1", 0), verifier, handshake_timeout=20, workers=1, queue=2,
                        verify_timeout=20)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    ghosts = []
    try:
        still_serving(port, space)  # app@<vhost> is known from now on
        for i in range(3):  # one on the only thread, two waiting: the queue is full
            sock = connect(port)
            sock.sendall(sasl.SASL_HEADER + sasl_init("PLAIN", f"\0ghost-{i}\0x".encode()))
            ghosts.append(sock)
        assert verifier.entered.acquire(timeout=10)
        wait_for(lambda: len(server._waiters[False]) == 2, 10, what="two unknown names waiting")
        with connect(port) as sock:  # a fourth unknown name is answered at once
            sock.sendall(sasl.SASL_HEADER + sasl_init("PLAIN", b"\0ghost-3\0x"))
            assert outcome_code(until_closed(sock)) == sasl.SYS_TEMP

        outcomes = []
        known = threading.Thread(target=lambda: outcomes.append(still_serving(port, space)))
        known.start()
        wait_for(lambda: len(server._waiters[True]) == 1, 10, what="the known login waiting")
        verifier.gate.release()  # ghost-0 ends: its thread goes to app, not to ghost-1
        known.join(10)
        assert outcomes == [None], "the known login did not get through"
        app = f"app@{space.vhost}"
        assert verifier.order[:3] == [app, "ghost-0", app]  # ahead of ghost-1 and ghost-2
    finally:
        for _ in range(3):
            verifier.gate.release()
        for sock in ghosts:
            sock.close()
        server.shutdown()
        server.server_close()
