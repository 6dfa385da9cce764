"""A standard space's connectors to remote AMQP endpoints (spec.connectors) on qdrouterd 1.19,
end to end with real servers as the remote site: a second qdrouterd and this machine's RabbitMQ
(its AMQP 1.0 listener, a user made for the module and deleted after it). A client of the space
reaches `<connector>/<address>` both ways, with the space's rights applied; a wrong password and
an untrusted certificate show in status.connectors; another space cannot use the connector. A
space of another MaaS site (the embedded router) is a remote too."""
import json
import subprocess
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest
import requests
from proton import Delivery, Message, Timeout
from proton.utils import BlockingConnection, LinkDetached, SendException

from config_service import services
from config_service.models import AddressSpace
from core.amqp import open_receiver, open_sender
from dataplane import qdrouterd
from tests.conftest import CTX, b64, client_for, wait_for
from tests.qdrouterd import AuthService
from tests.router.conftest import ADMIN_PASSWORD, RouterProcess, free_port, terminate, wait_port
from tests.workers.conftest import sync
from workers.agents.router import desired as rc
from workers.agents.router.agent import RouterAgent
from workers.clients.qdr import Management

ONLY_QDROUTERD = True  # tests/workers/conftest.py: the embedded router does not carry them
PASSWORD = "app-password"
# This machine's RabbitMQ (not the suite's node): the remote a tenant already runs.
RABBIT_AMQP, RABBIT_AMQPS = 5672, 5671
RABBIT_API, RABBIT_ADMIN = "http://127.0.0.1:15672/api", ("guest", "guest")


class RemoteRouter:
    """A second qdrouterd, the remote site: anonymous clients, every address anycast."""

    def __init__(self):
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="qdrouterd-remote-"))
        config = [["router", {"id": "remote-site", "mode": "standalone"}],
                  ["listener", {"host": "127.0.0.1", "port": str(self.port), "role": "normal",
                                "authenticatePeer": False, "saslMechanisms": "ANONYMOUS"}]]
        path = self.dir / "qdrouterd.json"
        path.write_text(json.dumps(config))
        with open(self.dir / "qdrouterd.log", "ab") as log:
            self.proc = subprocess.Popen(qdrouterd.command(path), stdout=log, stderr=log)
        wait_port(self.port, process=self.proc)

    def connect(self) -> BlockingConnection:
        return BlockingConnection(f"amqp://127.0.0.1:{self.port}", timeout=5)

    def stop(self) -> None:
        terminate(self.proc)


@pytest.fixture(scope="module")
def remote(router):
    site = RemoteRouter()
    yield site
    site.stop()


class RabbitUser:
    """A user of this machine's RabbitMQ for the module, allowed only queues `conn-<id>.*` of
    vhost `/`: qdrouterd's connector sends its host as the AMQP open hostname, so it reaches
    RabbitMQ's default vhost (docs/router.md)."""

    def __init__(self):
        self.tag = uuid.uuid4().hex[:8]
        self.name, self.password = f"maas-conn-{self.tag}", uuid.uuid4().hex
        self.queues = f"conn-{self.tag}."  # a token of its own: patterns match tokens
        self._api("put", f"/users/{self.name}", {"password": self.password, "tags": ""})
        pattern = f"^conn-{self.tag}\\..*$"
        self._api("put", f"/permissions/%2F/{self.name}",
                  {"configure": pattern, "read": pattern,
                   "write": f"^(conn-{self.tag}\\..*|amq\\.default)$"})

    @staticmethod
    def _api(method: str, path: str, body=None):
        response = requests.request(method, RABBIT_API + path, json=body, auth=RABBIT_ADMIN,
                                    timeout=10)
        response.raise_for_status()
        return response

    def connect(self) -> BlockingConnection:
        return BlockingConnection(f"amqp://127.0.0.1:{RABBIT_AMQP}", user=self.name,
                                  password=self.password, allowed_mechs="PLAIN",
                                  allow_insecure_mechs=True, timeout=5)

    def delete(self) -> None:
        for queue in self._api("get", "/queues/%2F?columns=name").json():
            if queue["name"].startswith(self.queues):
                self._api("delete", f"/queues/%2F/{quote(queue['name'], safe='')}")
        self._api("delete", f"/users/{self.name}")


@pytest.fixture(scope="module")
def rabbit(router):
    user = RabbitUser()
    yield user
    user.delete()
    # The node ends as it began: vhost `/` and the user guest alone, as far as this module goes.
    users = {u["name"] for u in requests.get(f"{RABBIT_API}/users", auth=RABBIT_ADMIN,
                                             timeout=10).json()}
    assert user.name not in users


@pytest.fixture(autouse=True)
def _owner(tenant, owner):
    tenant.owner_user = owner  # who reads the status through the API


@pytest.fixture(autouse=True)
def tls_dir(settings, tmp_path):
    # The remotes here listen on this machine: the operator opens loopback to connectors.
    settings.MAAS_CONNECTOR_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.MAAS_CONNECTOR_TLS_DIR = str(tmp_path / "connector-tls")
    return Path(settings.MAAS_CONNECTOR_TLS_DIR)


def space_with(tenant, connectors: list, name: str | None = None):
    return services.create_address_space(
        ctx=CTX, tenant=tenant, name=name or f"c{uuid.uuid4().hex[:6]}", type="standard",
        plan="standard-medium", spec={"connectors": connectors})


@pytest.fixture
def spaces():
    made = []
    yield made
    for space in made:
        if AddressSpace.objects.filter(uid=space.uid, terminating=False).exists():
            services.delete_address_space(ctx=CTX, space=space)
            sync(space)


def user(space, username="app", addresses=("*",)):
    return services.create_messaging_user(
        ctx=CTX, space=space, username=username,
        authentication={"type": "password", "password": b64(PASSWORD)},
        authorization=[{"addresses": list(addresses), "operations": ["send", "recv"]}])


def connect(router, space, username="app", password=PASSWORD) -> BlockingConnection:
    return BlockingConnection(f"amqp://127.0.0.1:{router.amqp_port}",
                              user=f"{username}@{space.vhost}", password=password,
                              allowed_mechs="PLAIN", allow_insecure_mechs=True, timeout=5,
                              virtual_host=space.vhost)


def status_connectors(tenant, space) -> list:
    response = client_for(tenant.owner_user).get(
        f"/api/v1/tenants/{tenant.slug}/addressspaces/{space.name}/")
    assert response.status_code == 200, response.content
    return response.json()["status"]["connectors"]


def ready(tenant, space) -> bool:
    return all(c["isReady"] for c in status_connectors(tenant, space))


def to_remote_router(remote) -> dict:
    return {"name": "site", "endpointHosts": [{"host": "127.0.0.1", "port": remote.port}],
            "addresses": [{"name": "orders", "pattern": "orders/*"}]}


def to_rabbit(rabbit, password=None, name="rabbit") -> dict:
    return {"name": name, "endpointHosts": [{"host": "127.0.0.1", "port": RABBIT_AMQP}],
            "credentials": {"username": {"value": rabbit.name},
                            "password": {"value": password or rabbit.password}},
            "addresses": [{"name": "queues", "pattern": f"{rabbit.queues}*"}]}  # conn-<id>.*


def applied_space(tenant, spaces, connector: dict, *usernames: str):
    """A space with `connector` and messaging users of every address, applied (its connector
    ready or not)."""
    space = space_with(tenant, [connector])
    spaces.append(space)
    for username in usernames:
        user(space, username)
    sync(space)
    return space


def ready_space(tenant, spaces, connector: dict, *usernames: str):
    """applied_space, its connector ready."""
    space = applied_space(tenant, spaces, connector, *usernames)
    wait_for(lambda: ready(tenant, space), 15, what=f"connector {connector['name']} ready")
    return space


def reaches_remote(conn, remote, body: str) -> None:
    """`body` sent by a client of the space to site/orders/eu is received at the remote
    router's orders/eu."""
    there = remote.connect()
    try:
        at_remote = there.create_receiver("orders/eu", credit=10)
        with sending(open_sender(conn, "site/orders/eu"), body, there):
            assert at_remote.receive(5).body == body
            at_remote.accept()
    finally:
        there.close()


def test_a_client_reaches_a_remote_routers_address_both_ways(router, remote, tenant, spaces):
    space = ready_space(tenant, spaces, to_remote_router(remote), "app")
    assert status_connectors(tenant, space) == [{"name": "site", "isReady": True,
                                                 "messages": []}]
    here, there = connect(router, space), remote.connect()
    try:
        both_ways(here, "site/orders/eu", there, "orders/eu")
    finally:
        here.close()
        there.close()


def both_ways(here, ours: str, there, theirs: str) -> None:
    """A message a client of the space (`here`) sends to `ours` reaches a receiver of `theirs`
    at the remote (`there`), and one sent to `theirs` there reaches a receiver of `ours`."""
    at_remote = there.create_receiver(theirs, credit=10)
    with sending(open_sender(here, ours), "out", there):
        assert at_remote.receive(5).body == "out"
        at_remote.accept()
    at_remote.close()
    receiver = open_receiver(here, ours, credit=10)  # routed to the remote when it returns
    with sending(there.create_sender(theirs), "in", here):
        assert receiver.receive(5).body == "in"
        receiver.accept()


@contextmanager
def sending(sender, body, receiving: BlockingConnection):
    """Sends `body` unsettled in a thread while the block receives it on `receiving`: the
    remote router settles it only once its receiver accepted it, which a send in this thread
    would wait for; `receiving` is driven meanwhile, so the acceptance goes out."""
    done: list = []

    def send():
        try:
            done.append(sender.send(Message(body=body)))
        except Exception as exc:  # noqa: BLE001 - said by the assertion below
            done.append(exc)
    thread = threading.Thread(target=send)
    thread.start()
    try:
        yield
    finally:
        # In short turns: a wait only looks at `done` again after an event of its own.
        deadline = time.monotonic() + 10
        while not done and time.monotonic() < deadline:
            try:
                receiving.wait(lambda: bool(done), timeout=0.2)
            except Timeout:
                pass
        thread.join(5)
    assert getattr(done[0], "remote_state", done[0]) == Delivery.ACCEPTED


def test_endpoint_hosts_are_tried_in_order(router, remote, tenant, spaces):
    dead = free_port()  # nothing listens there
    connector = {**to_remote_router(remote),
                 "endpointHosts": [{"host": "127.0.0.1", "port": dead},
                                   {"host": "127.0.0.1", "port": remote.port}]}
    space = applied_space(tenant, spaces, connector, "app")

    def second_host_up():
        [said] = status_connectors(tenant, space)
        return not said["isReady"] and any(
            m.startswith(f"Its links still go to 127.0.0.1:{dead}") for m in said["messages"])
    wait_for(second_host_up, 15, what="the second host connected, the links on the first")
    [said] = status_connectors(tenant, space)
    assert any(m.startswith(f"127.0.0.1:{dead} unreachable") for m in said["messages"]), said
    sync(space)  # the next run (a resync, a drift check, a change) moves the links
    [said] = status_connectors(tenant, space)
    assert said["isReady"], said
    here = connect(router, space)
    try:
        reaches_remote(here, remote, "via the second host")
    finally:
        here.close()


@pytest.fixture(scope="module")
def other_site(router):
    """Another MaaS site: the embedded router with the auth service of this test database, on
    which a space of its own is configured by the router agent (`configure_on`)."""
    auth = AuthService()
    site = RouterProcess(auth_port=auth.port)
    site.start()
    yield site
    site.stop()
    auth.stop()


def configure_on(site, space) -> None:
    """The router agent brings `site`'s router to the space's desired state."""
    mgmt = Management(f"amqp://127.0.0.1:{site.mgmt_port}", "admin", ADMIN_PASSWORD)
    try:
        report = RouterAgent(management=mgmt).reconcile(space)
    finally:
        mgmt.close()
    assert not report.space_error and not report.address_errors, report


def test_a_space_reaches_a_space_of_another_maas_site(router, other_site, tenant, spaces):
    far = space_with(tenant, [])  # the other site's space, an anycast address and a user
    spaces.append(far)
    services.create_address(ctx=CTX, space=far, address="orders", type="anycast",
                            plan="standard-small-anycast")
    user(far)
    configure_on(other_site, far)
    # The embedded router takes the space from the login `user@<vhost>` (qdrouterd's connector
    # cannot send the vhost as its AMQP hostname).
    connector = {"name": "far", "endpointHosts": [{"host": "127.0.0.1",
                                                   "port": other_site.amqp_port}],
                 "credentials": {"username": {"value": f"app@{far.vhost}"},
                                 "password": {"value": PASSWORD}},
                 "addresses": [{"name": "orders", "pattern": "orders"}]}
    space = ready_space(tenant, spaces, connector, "app")
    here = connect(router, space)
    there = BlockingConnection(f"amqp://127.0.0.1:{other_site.amqp_port}",
                               user=f"app@{far.vhost}", password=PASSWORD,
                               allowed_mechs="PLAIN", allow_insecure_mechs=True, timeout=5)
    try:
        both_ways(here, "far/orders", there, "orders")
    finally:
        here.close()
        there.close()


def test_a_client_reaches_a_rabbitmq_queue_both_ways(router, rabbit, tenant, spaces):
    space = ready_space(tenant, spaces, to_rabbit(rabbit), "app")
    queue = f"{rabbit.queues}orders"
    here = connect(router, space)
    try:
        # A bare name is RabbitMQ's queue, declared at attach (3.10, DATAPLANE.md).
        open_sender(here, f"rabbit/{queue}").send(Message(body="to rabbit"))
        at_rabbit = rabbit.connect()
        try:
            receiver = at_rabbit.create_receiver(queue, credit=10)
            assert receiver.receive(5).body == "to rabbit"
            receiver.accept()
            at_rabbit.create_sender(queue).send(Message(body="from rabbit"))
        finally:
            at_rabbit.close()
        receiver = open_receiver(here, f"rabbit/{queue}", credit=10)
        assert receiver.receive(5).body == "from rabbit"
        receiver.accept()
    finally:
        here.close()


def test_the_spaces_rights_apply_to_connector_addresses(router, remote, tenant, spaces):
    space = space_with(tenant, [to_remote_router(remote)])
    spaces.append(space)
    user(space, "narrow", addresses=["orders"])  # no rule for site/...
    user(space, "wide", addresses=["site/*"])
    sync(space)
    wait_for(lambda: ready(tenant, space), 15, what="the connector to be ready")
    conn = connect(router, space, "narrow")
    try:
        with pytest.raises(LinkDetached, match="unauthorized-access"):
            open_sender(conn, "site/orders/eu")  # the policy refuses the attach
    finally:
        conn.close()
    conn = connect(router, space, "wide")
    try:
        reaches_remote(conn, remote, "allowed")
    finally:
        conn.close()


def test_another_space_cannot_use_the_connector(router, remote, tenant, spaces):
    space = space_with(tenant, [to_remote_router(remote)])
    other = space_with(tenant, [])
    spaces.extend([space, other])
    user(space)
    user(other, "outsider")
    sync(space)
    sync(other)
    wait_for(lambda: ready(tenant, space), 15, what="the connector to be ready")
    # Into the space's vhost with another space's login: refused at open.
    # qdrouterd's policy: no group of the space's vhost names that login.
    with pytest.raises(Exception, match="connection disallowed by local policy"):
        BlockingConnection(f"amqp://127.0.0.1:{router.amqp_port}",
                           user=f"outsider@{other.vhost}", password=PASSWORD,
                           allowed_mechs="PLAIN", allow_insecure_mechs=True, timeout=5,
                           virtual_host=space.vhost)
    # In its own space `site/...` is nothing: no route to the remote, so no credit.
    there, conn = remote.connect(), connect(router, other, "outsider")
    try:
        at_remote = there.create_receiver("orders/eu", credit=10)
        sender = conn.create_sender("site/orders/eu")
        with pytest.raises((Timeout, SendException)):
            sender.send(Message(body="not for you"), timeout=2)
        with pytest.raises(Timeout):
            at_remote.receive(1)
    finally:
        conn.close()
        there.close()


def test_a_wrong_password_shows_in_status_until_it_is_corrected(router, rabbit, tenant,
                                                                 spaces, mgmt):
    space = applied_space(tenant, spaces, to_rabbit(rabbit, password="wrong-password"), "app")

    def refused():
        [connector] = status_connectors(tenant, space)
        return not connector["isReady"] and any(
            m.startswith("Authentication refused by 127.0.0.1:5672") for m in
            connector["messages"]) and connector
    said = wait_for(refused, 20, what="the refused login in status")
    assert said["name"] == "rabbit"
    portal = client_for(tenant.owner_user)
    portal.force_login(tenant.owner_user)
    page = portal.get(f"/portal/t/{tenant.slug}/spaces/{space.name}/").content.decode()
    assert "<td>Not ready</td><td>Authentication refused by 127.0.0.1:5672" in page
    # The tenant corrects it: a new password is a new connector on the router.
    services.change_address_space_plan(ctx=CTX, space=space, plan=space.plan,
                                       spec={"connectors": [to_rabbit(rabbit)]})
    sync(space)
    wait_for(lambda: ready(tenant, space), 15, what="the corrected connector ready")
    mine = [c for c in mgmt.query(rc.CONNECTOR, ["name"])
            if c["name"].startswith(f"maas:{space.vhost}:connector:")]
    assert len(mine) == 1  # the one with the wrong password is gone
    here = connect(router, space)
    try:
        open_sender(here, f"rabbit/{rabbit.queues}fixed").send(Message(body="logged in"))
    finally:
        here.close()


def test_a_tls_connector_that_trusts_the_remotes_ca_carries_messages(router, rabbit, tenant,
                                                                     spaces, tls_dir):
    from config_service.brokers import internal_ca

    ca = internal_ca()  # what signed RabbitMQ's TLS listener (deploy/local/services.sh)
    if not ca:
        pytest.skip("RabbitMQ has no TLS listener of the internal CA here")
    connector = {**to_rabbit(rabbit), "endpointHosts": [{"host": "localhost",
                                                         "port": RABBIT_AMQPS}],
                 "tls": {"caCert": {"value": Path(ca).read_text()}}}
    space = ready_space(tenant, spaces, connector, "app")
    [written] = list(tls_dir.rglob("ca.pem"))
    assert written.stat().st_mode & 0o777 == 0o600
    queue = f"{rabbit.queues}secure"
    here = connect(router, space)
    try:
        open_sender(here, f"rabbit/{queue}").send(Message(body="over TLS"))
        receiver = open_receiver(here, f"rabbit/{queue}", credit=10)
        assert receiver.receive(5).body == "over TLS"
        receiver.accept()
    finally:
        here.close()


def test_an_untrusted_certificate_shows_in_status(router, tenant, spaces):
    # RabbitMQ's TLS listener has a certificate of the internal CA, which this connector does
    # not trust (the system's CAs).
    bad = {"name": "tls", "endpointHosts": [{"host": "127.0.0.1", "port": RABBIT_AMQPS}],
           "tls": {}, "addresses": [{"name": "all", "pattern": "#"}]}
    space = space_with(tenant, [bad])
    spaces.append(space)
    sync(space)

    def failed():
        [connector] = status_connectors(tenant, space)
        return not connector["isReady"] and any(
            m.startswith("TLS failure with 127.0.0.1:5671") for m in connector["messages"])
    wait_for(failed, 20, what="the TLS failure in status")
