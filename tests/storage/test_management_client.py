"""The management API client's retry: once for a socket the broker closed, never for a call
that timed out (the broker is still doing it; sending it again doubles its work), and up to
three times more, backing off, for a read the broker answered 500 (RabbitMQ 3.10 lists users
while another client deletes one).

RabbitMQ cannot be made to close a keep-alive socket, or to stall, on cue: a raw TCP server
on loopback plays those two faults (it counts requests and answers as told). Everything the
storage controller does against the real broker is tested in the other modules here.
"""
import socket
import threading

import pytest

from workers.clients.rabbitmq_api import BrokerError, RabbitMQApi


class FaultyServer:
    """Reads each request; for the first `close_first` connections closes without answering,
    for the next `fail_first` answers 500, else stalls (`stall`) or answers 200 with `{}`."""

    def __init__(self, close_first: int = 0, stall: bool = False, fail_first: int = 0):
        self.fail_first = fail_first
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.requests = 0
        self.close_first = close_first
        self.stall = stall
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            self.requests += 1
            if self.requests <= self.close_first:
                conn.close()
            elif self.requests <= self.close_first + self.fail_first:
                conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n"
                             b"Connection: close\r\n\r\n")
                conn.close()
            elif self.stall:
                self.held.append(conn)
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: 2\r\nConnection: close\r\n\r\n{}")
                conn.close()

    def close(self):
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def server(request):
    s = FaultyServer(**request.param)
    yield s
    s.close()


@pytest.mark.parametrize("server", [{"stall": True}], indirect=True)
def test_a_call_that_timed_out_is_not_sent_again(server):
    api = RabbitMQApi(f"http://127.0.0.1:{server.port}/api", "guest", "guest", timeout=0.5)
    with pytest.raises(BrokerError) as err:
        api.put_vhost("v1")
    assert err.value.transient
    assert server.requests == 1


@pytest.mark.parametrize("server", [{"close_first": 1}], indirect=True)
def test_a_call_whose_socket_was_closed_is_sent_once_more(server):
    api = RabbitMQApi(f"http://127.0.0.1:{server.port}/api", "guest", "guest", timeout=5)
    assert api.request("GET", "/whoami") == {}
    assert server.requests == 2


@pytest.mark.parametrize("server", [{"fail_first": 3}], indirect=True)
def test_a_read_the_broker_failed_is_asked_again_three_times_and_a_write_never(server):
    api = RabbitMQApi(f"http://127.0.0.1:{server.port}/api", "guest", "guest", timeout=5)
    assert api.request("GET", "/users/without-permissions") == {}
    assert server.requests == 4
    server.fail_first, server.requests = 1, 0
    with pytest.raises(BrokerError):
        api.put_vhost("v1")  # a 500 to a write is an answer: the agent decides what next
    assert server.requests == 1
