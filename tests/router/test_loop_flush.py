"""The embedded router's loop looks only at the connections that have something to do: what
was read, what the engine gave output (PN_TRANSPORT) and, once a second, all of them for their
heartbeats. Before, every turn of the loop wrote every connection, and 800 idle connectors
cost about a tenth of a core more at rest (tests/bench/bench_router_idle.py). In process,
over real sockets (socket pairs) and real proton transports."""

import socket
from types import SimpleNamespace

import pytest
from cproton_ffi import lib as L

from dataplane.router.engine import Engine
from dataplane.router.loop import Conn, Loop


@pytest.fixture
def loop():
    loop = Loop()
    loop.written = []
    original = loop._write

    def counting_write(conn):
        loop.written.append(conn)
        original(conn)

    loop._write = counting_write
    pairs = []

    def bind(n: int) -> list[Conn]:
        conns = []
        for _ in range(n):
            mine, theirs = socket.socketpair()
            mine.setblocking(False)
            pairs.append((mine, theirs))
            conn = Conn(mine, "client", "in", "test")
            loop._bind(conn)
            conns.append(conn)
        return conns

    loop.bind = bind
    yield loop
    for mine, theirs in pairs:
        mine.close()
        theirs.close()


def test_a_new_connection_is_written_once_then_left_alone_until_marked(loop):
    conns = loop.bind(50)
    loop.flush()
    assert sorted(c.identity for c in loop.written) == sorted(c.identity for c in conns)
    loop.written.clear()

    loop.flush()
    assert loop.written == []  # nothing read, nothing given output: nothing looked at

    loop.mark(conns[7].pn)
    loop.flush()
    assert loop.written == [conns[7]]


def test_the_tick_looks_at_every_connection_for_its_heartbeat(loop):
    conns = loop.bind(20)
    loop.flush()
    loop.written.clear()

    loop._tick()
    loop.flush()
    assert len(loop.written) == len(conns)


def test_output_the_engine_makes_marks_its_connection(loop):
    """Opening a connection gives proton output to write and a PN_TRANSPORT event: consuming
    the events marks that connection, and only that one."""
    conns = loop.bind(5)
    loop.flush()
    loop.written.clear()

    L.pn_connection_open(conns[2].pn)
    engine = SimpleNamespace(loop=loop, _dispatch={})
    Engine.process_events(engine)
    assert loop.dirty == {conns[2]}
    loop.flush()
    assert loop.written == [conns[2]]
    assert L.pn_transport_pending(conns[2].transport) == 0  # the open went to the socket
