"""The management API client's retry: once for a socket the broker closed, never for a call
that timed out (the broker is still doing it; sending it again doubles its work).

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
    else stalls (`stall`) or answers 200 with `{}`."""

    def __init__(self, close_first: int = 0, stall: bool = False):
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
