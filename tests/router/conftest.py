"""Fixtures for the embedded router tests: a real router process, the real auth service it relays
SASL to (over the fixed users below), real proton clients, and RabbitMQ (localhost, guest/guest)
set up through its management HTTP API. No Django."""

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests
from proton import Message
from proton.utils import BlockingConnection

from dataplane.authservice.server import AuthServer, Identity
from tests import broker

ROOT = Path(__file__).resolve().parents[2]
ADMIN_PASSWORD = "admin-secret"
RABBIT_API = broker.API_URL
RABBIT_AUTH = ("guest", "guest")

ADDRESS = "org.apache.qpid.dispatch.router.config.address"
LINK_ROUTE = "org.apache.qpid.dispatch.router.config.linkRoute"
AUTO_LINK = "org.apache.qpid.dispatch.router.config.autoLink"
CONNECTOR = "org.apache.qpid.dispatch.connector"
VHOST = "org.apache.qpid.dispatch.vhost"
ADMIN_USER = "admin"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 10.0, process=None) -> None:
    """Waits until something listens on `port`; gives up early once `process` has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if process is not None and process.poll() is not None:
                break
            time.sleep(0.05)
    raise RuntimeError(f"port {port} not listening")


class FixedUsers:
    """The verifier of the tests' auth service: the users tests register (`add_tenant`) and the
    router admin, with the database verifier's rules (dataplane/authservice/users.py): `user@vhost`,
    or a bare `user` whose password fits in exactly one vhost; the identity is `user@vhost`."""

    def __init__(self):
        self.passwords: dict[tuple[str, str], str] = {}  # (vhost, user) -> password
        self.lock = threading.Lock()

    def add(self, vhost: str, user: str, password: str) -> None:
        with self.lock:
            self.passwords[(vhost, user)] = password

    def __call__(self, login: str, password: str) -> Identity | None:
        if login == ADMIN_USER:
            return Identity(ADMIN_USER, ADMIN_USER) if password == ADMIN_PASSWORD else None
        user, at, vhost = login.rpartition("@")
        with self.lock:
            fits = [(v, u) for (v, u), p in self.passwords.items() if p == password
                    and (u, v) == ((user, vhost) if at else (login, v))]
        if len(fits) != 1:
            return None
        vhost, user = fits[0]
        return Identity(f"{user}@{vhost}", user)


USERS = FixedUsers()  # one set for the whole test run: each module uses vhosts of its own


class FixedAuthService:
    """The real auth service (dataplane.authservice.server.AuthServer) in a thread of the test
    process, verifying against USERS instead of the database; the router's relay to it is the
    real one."""

    def __init__(self, verify=USERS, port: int = 0, ssl_context=None):
        self.server = AuthServer(("127.0.0.1", port), verify, ssl_context=ssl_context)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def terminate(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 5 s."""
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def broker_ca_args() -> list[str]:
    """The brokers' TLS profile, as runplatform gives the router: the agent's broker
    connectors name it where the brokers have TLS listeners (config_service.brokers)."""
    from config_service.brokers import internal_ca

    ca = internal_ca()
    return ["--broker-ca", ca] if ca else []


class RouterProcess:
    """`python -m dataplane.router` on free ports; restartable on the same ports. It relays SASL
    to the auth service on `auth_port`, or to a FixedAuthService of its own."""

    def __init__(self, extra_args=(), auth_port: int | None = None):
        self.own_auth = FixedAuthService() if auth_port is None else None
        self.auth_port = auth_port if auth_port is not None else self.own_auth.port
        self._pick_ports()
        self.extra_args = list(extra_args)
        self.proc = None
        self.started = False

    def _pick_ports(self) -> None:
        self.amqp_port = free_port()
        self.amqps_port = free_port()
        self.mgmt_port = free_port()
        self.metrics_port = free_port()

    def start(self) -> None:
        """Starts the router and waits for its listeners. free_port's port is free when picked,
        not when the router binds it: another process's outgoing connection may take it
        meanwhile (seen once in CI: "Address already in use", the router gone). A first start
        whose router exited so picks new ports and tries again; a restart keeps its ports."""
        for attempt in range(3):
            env = dict(os.environ, PYTHONPATH=str(ROOT))
            cmd = [sys.executable, "-m", "dataplane.router", "--amqp-port", str(self.amqp_port),
                   "--amqps-port", str(self.amqps_port), "--management-port",
                   str(self.mgmt_port), "--metrics-port", str(self.metrics_port),
                   "--log-level", "WARNING", "--admin-user", ADMIN_USER,
                   "--auth-service", f"127.0.0.1:{self.auth_port}", *broker_ca_args(),
                   *self.extra_args]
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env)
            try:
                wait_port(self.amqp_port, process=self.proc)
                wait_port(self.mgmt_port, process=self.proc)
            except RuntimeError:
                if self.started or self.proc.poll() is None or attempt == 2:
                    raise
                self._pick_ports()
                continue
            self.started = True
            return

    def stop(self) -> None:
        """Stops the router; its own auth service, if any, stays for a restart."""
        if self.proc is not None:
            terminate(self.proc)
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def connect(self, user: str, password: str, vhost: str | None = None, **kw):
        return BlockingConnection(f"amqp://127.0.0.1:{self.amqp_port}", user=user,
                                  password=password, allowed_mechs="PLAIN",
                                  allow_insecure_mechs=True, virtual_host=vhost, timeout=5, **kw)

    def management(self) -> "Management":
        return Management(self.mgmt_port)


class Management:
    """A minimal qdrouterd management client, as the router agent would speak it."""

    def __init__(self, port: int):
        self.conn = BlockingConnection(f"amqp://127.0.0.1:{port}", user=ADMIN_USER,
                                       password=ADMIN_PASSWORD, allowed_mechs="PLAIN",
                                       allow_insecure_mechs=True, timeout=5)
        self.receiver = self.conn.create_receiver(None, dynamic=True)
        self.sender = self.conn.create_sender("$management")
        self.reply_to = self.receiver.remote_source.address
        self._ids = 0

    def request(self, operation: str, body=None, **props):
        self._ids += 1
        props["operation"] = operation
        self.sender.send(Message(body=body, properties=props, reply_to=self.reply_to,
                                 correlation_id=self._ids))
        reply = self.receiver.receive(5)
        assert reply.correlation_id == self._ids
        return reply.properties["statusCode"], reply.properties["statusDescription"], reply.body

    def create(self, etype: str, name: str, **attrs):
        status, description, body = self.request("CREATE", attrs, type=etype, name=name)
        assert status == 201, description
        return body

    def delete(self, etype: str, name: str):
        return self.request("DELETE", None, type=etype, name=name)

    def query(self, etype: str, names=()):
        status, _, body = self.request("QUERY", {"attributeNames": list(names)},
                                       entityType=etype)
        assert status == 200
        return [dict(zip(body["attributeNames"], row, strict=True)) for row in body["results"]]

    def close(self):
        self.conn.close()


def add_tenant(mgmt: Management, vhost: str, users: dict[str, str], groups: dict,
               **vhost_attrs) -> None:
    """A vhost policy on the router, and its messaging users for the tests' auth service."""
    for username, password in users.items():
        USERS.add(vhost, username, password)
    mgmt.create(VHOST, vhost, hostname=vhost, groups=groups, **vhost_attrs)


@pytest.fixture(scope="module")
def router():
    proc = RouterProcess()
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def mgmt(router):
    client = router.management()
    yield client
    client.close()


class Rabbit:
    """RabbitMQ set-up through the management HTTP API, in a throw-away vhost."""

    def __init__(self):
        self.vhost = f"maas-test-{uuid.uuid4().hex[:8]}"
        self.users: list[str] = []

    def _put(self, path: str, body=None):
        r = requests.put(f"{RABBIT_API}{path}", json=body or {}, auth=RABBIT_AUTH, timeout=60)
        r.raise_for_status()

    def setup(self):
        self._put(f"/vhosts/{self.vhost}")
        self._put(f"/permissions/{self.vhost}/guest",
                  {"configure": ".*", "write": ".*", "read": ".*"})

    def user(self, name: str, password: str):
        """A broker user with every permission on the vhost (deleted with it)."""
        quoted = requests.utils.quote(name, safe="")
        self._put(f"/users/{quoted}", {"password": password, "tags": ""})
        self._put(f"/permissions/{self.vhost}/{quoted}",
                  {"configure": ".*", "write": ".*", "read": ".*"})
        self.users.append(quoted)

    def queue(self, name: str, **arguments):
        self._put(f"/queues/{self.vhost}/{name}", {"durable": True, "arguments": arguments})

    def exchange(self, name: str, kind: str = "topic"):
        self._put(f"/exchanges/{self.vhost}/{name}", {"type": kind, "durable": True})

    def bind(self, exchange: str, queue: str, key: str):
        r = requests.post(f"{RABBIT_API}/bindings/{self.vhost}/e/{exchange}/q/{queue}",
                          json={"routing_key": key}, auth=RABBIT_AUTH, timeout=60)
        r.raise_for_status()

    def teardown(self):
        requests.delete(f"{RABBIT_API}/vhosts/{self.vhost}", auth=RABBIT_AUTH, timeout=60)
        for quoted in self.users:
            requests.delete(f"{RABBIT_API}/users/{quoted}", auth=RABBIT_AUTH, timeout=60)


class TcpProxy:
    """A TCP relay in front of RabbitMQ so a test can cut the router's broker connections
    (RabbitMQ's own connection list lags by a stats interval, so it cannot be relied on)."""

    def __init__(self, target=("127.0.0.1", broker.AMQP_PORT)):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.connections = 0  # accepted so far
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.pairs.append((client, upstream))
                self.connections += 1
            for a, b, sent in ((client, upstream, self.sent), (upstream, client, None)):
                threading.Thread(target=self._pipe, args=(a, b, sent), daemon=True).start()

    def sent(self, data: bytes, stream: dict) -> None:
        """What the client sent, as it passes (`stream`: this connection's own state)."""

    @staticmethod
    def _pipe(src, dst, seen=None):
        stream: dict = {}
        try:
            while data := src.recv(65536):
                if seen is not None:
                    seen(data, stream)
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def drop(self) -> int:
        """Cut every relayed connection, as a broker restart would."""
        with self.lock:
            pairs, self.pairs = self.pairs, []
        for pair in pairs:
            for sock in pair:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
        return len(pairs)

    def close(self):
        self.listener.close()
        self.drop()


@pytest.fixture(scope="module")
def rabbit():
    r = Rabbit()
    r.setup()
    yield r
    r.teardown()


def pump_until(condition, *conns, timeout: float = 5.0) -> None:
    """Let several blocking connections do their I/O until `condition()` holds."""
    from proton import Timeout

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        for conn in conns:
            try:
                conn.wait(condition, timeout=0.02)
            except Timeout:
                pass


def pump(*conns, seconds: float = 0.3) -> None:
    deadline = time.monotonic() + seconds
    pump_until(lambda: time.monotonic() > deadline, *conns, timeout=seconds + 1)
