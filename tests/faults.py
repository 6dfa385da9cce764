"""Fault injection in front of real services: an HTTP relay that can fail chosen requests.

Not a mock: every request it does not fail goes to the real server and its real answer comes
back; the failures are what a broker under load gives (503, or no answer until a timeout)."""
import http.server
import threading

import requests

from tests import broker


class HttpFaultProxy:
    """Relays HTTP to `target` (e.g. RabbitMQ's management API); while `fail_methods` holds a
    request's method, that request gets 503 and never reaches the server."""

    def __init__(self, target: str):
        self.target = target.rstrip("/")
        self.fail_methods: set[str] = set()
        self.failed: list[str] = []
        self.seen: list[str] = []  # "METHOD path" of every request relayed
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _relay(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                proxy.seen.append(f"{self.command} {self.path}")
                if self.command in proxy.fail_methods:
                    proxy.failed.append(f"{self.command} {self.path}")
                    self._answer(503, b'{"error":"injected fault"}', "application/json")
                    return
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "content-length", "connection")}
                upstream = requests.request(self.command, proxy.target + self.path, data=body,
                                            headers=headers, timeout=30)
                self._answer(upstream.status_code, upstream.content,
                             upstream.headers.get("Content-Type", "application/json"))

            def _answer(self, status: int, content: bytes, content_type: str):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_PUT = do_POST = do_DELETE = _relay

            def log_message(self, *args):  # quiet
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


# RabbitMQ records a vhost, then starts it, one at a time (at a few hundred vhosts a start
# waited minutes). Holding the starts gives a vhost that is recorded but not running, on cue: a
# process of the test's own on the node suspends the one that starts vhosts, and resumes it when
# told, or after 30 s whatever happens to the test.
_HOLDER = "maas_test_vhost_starts_held"
_HOLD = f"""
P = whereis(rabbit_vhost_sup_sup),
S = spawn(fun() -> receive go -> ok end, erlang:suspend_process(P),
                   receive resume -> ok after 30000 -> ok end, erlang:resume_process(P) end),
register({_HOLDER}, S), S ! go, ok.
"""
_RELEASE = f"case whereis({_HOLDER}) of undefined -> ok; S -> S ! resume, ok end."


def hold_vhost_starts() -> None:
    _rabbitmqctl_eval(_HOLD)


def release_vhost_starts() -> None:
    _rabbitmqctl_eval(_RELEASE)


def _rabbitmqctl_eval(expression: str) -> None:
    broker.rabbitmqctl("eval", expression, timeout=60)
