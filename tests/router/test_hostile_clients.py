"""Clients that would take the login path from everyone else, against the embedded router and the
real auth service (over the tests' users): sockets that say nothing or half a header cost the
auth service no connection and are closed at the handshake deadline; a source over its limits is
refused at accept while another source logs in; a source whose logins fail waits before its
next one. The attacker and the victim are different loopback addresses (127.0.0.2, .3)."""
import socket
import time

import pytest
import requests

from dataplane.authservice import sasl

from .conftest import RouterProcess, add_tenant

ATTACKER, VICTIM, GUESSER = "127.0.0.2", "127.0.0.3", "127.0.0.4"
SLOW, GREEDY = "127.0.0.5", "127.0.0.6"  # each test's attacker its own: none sees another's
HANDSHAKE = 1.0
PENDING_PER_HOST = 8


@pytest.fixture(scope="module")
def router():
    proc = RouterProcess(extra_args=(
        "--handshake-timeout", str(HANDSHAKE), "--pending-per-host", str(PENDING_PER_HOST),
        "--connect-rate-per-host", "1000", "--connect-burst-per-host", "1000"))
    proc.start()
    mgmt = proc.management()
    add_tenant(mgmt, "calm", {"vic": "vic-pw"}, {"all": {"users": "vic", "sources": "*",
                                                         "targets": "*"}})
    mgmt.close()
    yield proc
    proc.stop()
    proc.own_auth.stop()


def raw(port: int, source: str, payload: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    if payload:
        sock.sendall(payload)
    return sock


def closed_after(sock: socket.socket) -> float:
    """Seconds until the router closes the socket (reading whatever it sends meanwhile)."""
    start = time.monotonic()
    try:
        while sock.recv(4096):
            pass
    except (ConnectionResetError, TimeoutError):
        pass
    return time.monotonic() - start


def login(port: int, source: str, user: str, password: str) -> int:
    """A bare client's SASL PLAIN from `source`: the outcome code."""
    with raw(port, source, sasl.SASL_HEADER) as sock:
        reader = sasl.Reader(sock, time.monotonic() + 10)
        assert reader.header() == sasl.SASL_HEADER
        assert reader.performative(sasl.SASL_FRAME).code == sasl.MECHANISMS
        sock.sendall(sasl.init("PLAIN", f"\0{user}\0{password}".encode()))
        return reader.performative(sasl.SASL_FRAME).field(0)


def test_sockets_that_say_nothing_or_only_the_sasl_header_cost_the_auth_service_nothing(router):
    silent = [raw(router.amqp_port, ATTACKER, payload)
              for payload in (b"", sasl.SASL_HEADER) * (PENDING_PER_HOST // 2)]
    try:
        # The router answers the header with the mechanisms itself, asking the service nothing.
        reader = sasl.Reader(silent[1], time.monotonic() + 5)
        assert reader.header() == sasl.SASL_HEADER
        assert sasl.symbols(reader.performative(sasl.SASL_FRAME).field(0)) == ["PLAIN"]
        assert router.own_auth.server.connections == 0
        assert login(router.amqp_port, VICTIM, "vic@calm", "vic-pw") == sasl.OK
    finally:
        for sock in silent:
            sock.close()


def test_a_half_sent_header_or_nothing_is_closed_at_the_handshake_deadline(router):
    for payload in (b"AMQP", b"", sasl.SASL_HEADER):
        sock = raw(router.amqp_port, SLOW, payload)
        assert HANDSHAKE - 0.2 < closed_after(sock) < HANDSHAKE + 2
        sock.close()


def test_a_source_over_its_share_is_refused_at_accept_and_another_source_logs_in(router):
    held = [raw(router.amqp_port, GREEDY) for _ in range(PENDING_PER_HOST)]
    try:
        extra = raw(router.amqp_port, GREEDY, sasl.SASL_HEADER)
        assert closed_after(extra) < 0.5  # closed at accept: not even the header answered
        extra.close()
        assert login(router.amqp_port, VICTIM, "vic@calm", "vic-pw") == sasl.OK
        metrics = requests.get(f"http://127.0.0.1:{router.metrics_port}/metrics", timeout=5).text
        assert 'maas_router_connections_refused_total{reason="pending_per_source"} 1.0' in metrics
    finally:
        for sock in held:
            sock.close()


def test_a_source_whose_logins_fail_waits_longer_before_each_next_one(router):
    started = time.monotonic()
    assert login(router.amqp_port, GUESSER, "nobody@calm", "guess-1") == sasl.AUTH
    first = time.monotonic() - started
    for guess in ("guess-2", "guess-3"):  # delays of 0.1 s, then 0.2 s before these
        assert login(router.amqp_port, GUESSER, "nobody@calm", guess) == sasl.AUTH
    started = time.monotonic()
    assert login(router.amqp_port, VICTIM, "vic@calm", "vic-pw") == sasl.OK
    assert time.monotonic() - started < 0.4  # another source is not held back
    started = time.monotonic()
    assert login(router.amqp_port, GUESSER, "vic@calm", "vic-pw") == sasl.OK  # 0.4 s first
    assert time.monotonic() - started >= 0.4 > first
    started = time.monotonic()
    assert login(router.amqp_port, GUESSER, "vic@calm", "vic-pw") == sasl.OK
    assert time.monotonic() - started < 0.4  # its success forgave the source's failures
    metrics = requests.get(f"http://127.0.0.1:{router.metrics_port}/metrics", timeout=5).text
    assert "maas_router_logins_failed_total 3.0" in metrics
