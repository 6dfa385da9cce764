"""A standard space on a mesh of three qdrouterd interior routers (docs/router.md, "The router
network"): the router agent configures every router, a sender on router 1 and a receiver on
router 3 exchange messages on every address type and request/response, and when router 1 is
SIGKILLed mid-stream its clients reconnect through the space's failover list and lose no
accepted queue or topic message. A router that is down leaves its space not Active, the
others serving; restarted, the router watch restores it. The routers' links to each other
take only the mesh CA's certificates.

The routers serve this one space (`tenant_vhost`), as a space's own routers do on Kubernetes
and in EnMasse: on a router shared by spaces qdrouterd 1.19 refuses replies to dynamic
addresses (test_request_response_e2e.py)."""
import os
import signal
import ssl
import threading
import uuid

import pytest
from proton import ConnectionException, Message, SSLDomain, Timeout
from proton.utils import BlockingConnection, LinkDetached, SendException

from config_service import services
from config_service.api.resources import endpoints as endpoint_statuses
from config_service.models import AddressSpace
from config_service.status import address_status, agent_states
from core.amqp import open_receiver, open_sender
from tests.conftest import CTX, wait_for
from tests.qdrouterd import AuthService, Mesh, VhostRelay, needs_qdrouterd
from tests.router.conftest import ADMIN_PASSWORD, pump_until
from tests.workers.conftest import sync
from workers import connections, endpoints
from workers.agents.router import desired as rc
from workers.agents.router import watch as router_watch
from workers.agents.router.agent import close_pooled
from workers.clients.qdr import Management
from workers.usage import sampler

from .test_standard_space_e2e import PASSWORD, add, user, wait_for_bindings

pytestmark = [needs_qdrouterd, pytest.mark.django_db(transaction=True), pytest.mark.slow]
NODE = "org.apache.qpid.dispatch.router.node"
ADDRESSES = {"orders": ("queue", "standard-small-queue"),
             "news": ("topic", "standard-small-topic"),
             "jobs": ("anycast", "standard-small-anycast"),
             "requests": ("anycast", "standard-small-anycast"),
             "events": ("multicast", "standard-small-multicast")}
SENT = 150  # per stream (queue, topic); router 1 is killed after KILL_AFTER of them
KILL_AFTER = 50


@pytest.fixture
def router_settings():
    """Not the module router of conftest: the test starts its space's mesh."""


@pytest.fixture
def mesh_space(tenant, settings, tmp_path):
    space = services.create_address_space(
        ctx=CTX, tenant=tenant, name=f"mesh{uuid.uuid4().hex[:5]}", type="standard",
        plan="standard-medium")
    for name, (type_, plan) in ADDRESSES.items():
        add(space, name, type_, plan)
    user(space)
    auth, relay = AuthService(), VhostRelay()
    mesh = Mesh(3, auth.port, str(tmp_path / "mesh-tls"), tenant_vhost=space.vhost)
    try:
        mesh.start()
        mesh.settings(settings)
        settings.MAAS_ROUTER_ADMIN_USER = "admin"
        settings.MAAS_ROUTER_ADMIN_PASSWORD = ADMIN_PASSWORD
        settings.MAAS_VHOST_RELAY_PORT = relay.port
        wait_for(lambda: all(len(nodes(r)) == 3 for r in mesh.routers), 30,
                 what="every router seeing the two others")
        sync(space)
        yield space, mesh
        close_pooled()
        services.delete_address_space(ctx=CTX, space=space)
        sync(space)
    finally:
        close_pooled()
        mesh.stop()
        relay.stop()
        auth.stop()


def management(router) -> Management:
    return Management(f"amqp://127.0.0.1:{router.mgmt_port}", "admin", ADMIN_PASSWORD)


def nodes(router) -> list:
    try:
        mgmt = management(router)
    except Exception:  # noqa: BLE001 - not up yet
        return []
    try:
        return mgmt.query(NODE, ["id"])
    finally:
        mgmt.close()


def phases(space) -> dict:
    space = AddressSpace.objects.get(uid=space.uid)
    states = agent_states([space.uid]).get(space.uid, {})
    return {a.address: address_status(space, a, states) for a in space.addresses.all()}


def connect(url: str, space) -> BlockingConnection:
    return BlockingConnection(url, user=f"app@{space.vhost}", password=PASSWORD,
                              allowed_mechs="PLAIN", allow_insecure_mechs=True, timeout=5,
                              virtual_host=space.vhost)


def url_of(router) -> str:
    return f"amqp://127.0.0.1:{router.amqp_port}"


def test_every_router_is_configured_and_clients_on_two_routers_exchange_every_kind(mesh_space):
    space, mesh = mesh_space
    assert {a: s.phase for a, s in phases(space).items()} == dict.fromkeys(ADDRESSES, "Active")
    prefix, owned = rc.owner_prefix(space.vhost), []
    for router in mesh.routers:  # the same desired state on each router
        mgmt = management(router)
        try:
            owned.append({(etype, row["name"]) for etype in (rc.ADDRESS, rc.AUTO_LINK,
                                                             rc.LINK_ROUTE)
                          for row in mgmt.query(etype, ["name"])
                          if str(row["name"]).startswith(prefix)})
        finally:
            mgmt.close()
    assert owned[0] == owned[1] == owned[2]
    # the queue's autoLinks, in and out, on every router: each has its own link to the broker
    assert sum(etype == rc.AUTO_LINK and "orders" in name for etype, name in owned[0]) >= 2
    # The space's clients get each router, the first first.
    messaging = next(e for e in endpoint_statuses(space) if e["name"] == "messaging")
    assert [u.rsplit(":", 1)[1] for u in messaging["failoverUrls"]
            if u.startswith("amqp://")] == [str(r.amqp_port) for r in mesh.routers]

    collector = Collector(url_of(mesh.routers[2]), space, ("orders", "news", "jobs", "events"))
    wait_for_bindings(space, "news", 1)
    wait_for(lambda: consumers_seen(mesh.routers[0], space, ("jobs", "events")), 10,
             what="router 1 knowing router 3's receivers")
    first = connect(url_of(mesh.routers[0]), space)
    for address in collector.got:
        open_sender(first, address).send(Message(body=f"to {address}"), timeout=10)
    wait_for(lambda: all(collector.got[a] == [f"to {a}"] for a in collector.got), 10,
             what="each message at router 3's receivers")
    collector.close()
    # Metered on each router, once: the sender's router counts it in, the receiver's out.
    rows = [r for r in sampler.collect() if r["space"] == space.name and r["address"] == "jobs"]
    assert {r["source"] for r in rows} == {
        f"router:amqp://127.0.0.1:{r.mgmt_port}" for r in mesh.routers}
    assert (sum(r["messages_in"] for r in rows), sum(r["messages_out"] for r in rows)) == (1, 1)
    # An operator sees each router's clients, and closes one on router 3 by its id.
    third = connect(url_of(mesh.routers[2]), space)
    listed = connections.connections(space)
    ids = sorted(c.id.split("-")[0] for c in listed)
    assert ids == ["router", "router3"], ids
    on_third = next(c for c in listed if c.id.startswith("router3-"))
    assert connections.close(space, on_third.id) is not None
    with pytest.raises((ConnectionException, LinkDetached, Timeout)):
        open_sender(third, "jobs").send(Message(body="closed"), timeout=5)
    responder = connect(url_of(mesh.routers[2]), space)
    assert request_response(first, responder) == ("c-1", "PING")
    first.close()
    responder.close()


class Collector(threading.Thread):
    """A receiver of each address on one connection of its own, served by a thread of its
    own: a blocking client's connection does I/O only while it is waited on, and qdrouterd
    closes a client that said nothing for 16 s (amqp:resource-limit-exceeded)."""

    def __init__(self, url: str, space, addresses: tuple, credit: int = 2 * 150):
        super().__init__(daemon=True)
        self.url, self.space, self.credit = url, space, credit
        self.got: dict[str, list] = {a: [] for a in addresses}
        self.ready, self.stopping = threading.Event(), threading.Event()
        self.error = None
        self.start()
        assert self.ready.wait(15) and self.error is None, self.error

    def run(self) -> None:
        try:
            conn = connect(self.url, self.space)
            receivers = {a: open_receiver(conn, a, credit=self.credit) for a in self.got}
            self.ready.set()
            while not self.stopping.is_set():
                for address, receiver in receivers.items():
                    try:
                        message = receiver.receive(0.05)
                    except Timeout:
                        continue
                    receiver.accept()
                    self.got[address].append(message.body)
            conn.close()
        except Exception as exc:  # noqa: BLE001 - reported to the test
            self.error = exc
            self.ready.set()

    def close(self) -> None:
        self.stopping.set()
        self.join(15)
        assert self.error is None, self.error


def consumers_seen(router, space, addresses) -> bool:
    """Router `router` has a route to a receiver of each of `addresses` elsewhere in the mesh."""
    mgmt = management(router)
    try:
        rows = mgmt.query(rc.ROUTER_ADDRESS, ["key", "remoteCount"])
    finally:
        mgmt.close()
    remote = {str(r["key"]) for r in rows if r.get("remoteCount")}
    return all(any(key.endswith(f"{space.vhost}/{a}") for key in remote) for a in addresses)


def request_response(requester: BlockingConnection, responder: BlockingConnection) -> tuple:
    """A request from one router's client, answered by another router's client to the
    dynamic reply-to the requester's router made: the reply crosses the mesh."""
    requests = responder.create_receiver("requests", credit=1)
    replies = requester.create_receiver(None, dynamic=True, credit=1)
    reply_to = replies.remote_source.address
    assert "/maas-router-1/" in reply_to  # router 1's own address
    errors = []

    def respond():
        try:
            request = requests.receive(15)
            requests.accept()
            responder.create_sender(request.reply_to, name="reply").send(
                Message(body=request.body.upper(), correlation_id=request.correlation_id),
                timeout=10)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            errors.append(exc)

    thread = threading.Thread(target=respond)
    thread.start()
    sender = requester.create_sender("requests")
    sender.send(Message(body="ping", reply_to=reply_to, correlation_id="c-1"), timeout=10)
    reply = replies.receive(15)
    replies.accept()
    # the acceptance leaves only as the requester's connection does I/O: the responder's
    # send returns once it has
    pump_until(lambda: not thread.is_alive(), requester, timeout=20)
    assert errors == []
    return reply.correlation_id, reply.body


class FailoverSender:
    """Sends `SENT` numbered messages to each of `addresses`, each until the router accepted
    it (settled: the broker has it), reconnecting through `urls` in turn when its connection
    goes: the message in flight then is sent again (a duplicate at most, never a loss)."""

    def __init__(self, urls: list[str], space, addresses: tuple, kill_after: int, kill):
        self.urls, self.space, self.addresses = urls, space, addresses
        self.kill_after, self.kill = kill_after, kill
        self.accepted: dict[str, set] = {a: set() for a in addresses}
        self.reconnects, self.at = 0, 0

    def _open(self):
        for _ in range(10 * len(self.urls)):
            try:
                conn = connect(self.urls[self.at % len(self.urls)], self.space)
                return conn, {a: open_sender(conn, a) for a in self.addresses}
            except (ConnectionException, LinkDetached, Timeout):
                self.at += 1
                self.reconnects += 1
        raise AssertionError(f"no router of {self.urls} took the client back")

    def run(self) -> None:
        conn, senders = self._open()
        for i in range(SENT):
            if i == self.kill_after:
                self.kill()
            for address in self.addresses:
                while True:
                    try:
                        senders[address].send(Message(id=f"{address}-{i}", body=i), timeout=10)
                        self.accepted[address].add(i)
                        break
                    except (ConnectionException, LinkDetached, Timeout, SendException):
                        try:
                            conn.close()
                        except Exception:  # noqa: BLE001 - it is gone already
                            pass
                        self.at += 1
                        self.reconnects += 1
                        conn, senders = self._open()
        conn.close()


def test_router_1_killed_mid_stream_loses_no_accepted_queue_or_topic_message(mesh_space):
    space, mesh = mesh_space
    first, _, third = mesh.routers
    urls = [u for u in next(e for e in endpoint_statuses(space)
                            if e["name"] == "messaging")["failoverUrls"] if u.startswith("amqp://")]
    router_watch.tick(*(f"amqp://127.0.0.1:{r.mgmt_port}" for r in mesh.routers))  # known runs
    collector = Collector(url_of(third), space, ("orders", "news"))
    wait_for_bindings(space, "news", 1)

    sender = FailoverSender(urls, space, ("orders", "news"), KILL_AFTER,
                            lambda: os.kill(first.proc.pid, signal.SIGKILL))
    sender.run()
    got = collector.got
    wait_for(lambda: all(sender.accepted[a] <= set(got[a]) for a in got), 60,
             what="every accepted message at router 3's receivers")
    for address in got:
        lost = sender.accepted[address] - set(got[address])
        duplicates = len(got[address]) - len(set(got[address]))
        print(f"{address}: {len(sender.accepted[address])} accepted, {len(lost)} lost, "
              f"{duplicates} duplicates, {sender.reconnects} reconnects")
        assert lost == set()
        assert len(sender.accepted[address]) == SENT
    assert sender.reconnects >= 1  # it did fail over: router 1 was gone

    # Anycast and multicast resume across the surviving routers: router 2 to router 3.
    more = Collector(url_of(third), space, ("jobs", "events"))
    wait_for(lambda: consumers_seen(mesh.routers[1], space, ("jobs", "events")), 10,
             what="router 2 knowing router 3's receivers")
    second = connect(url_of(mesh.routers[1]), space)
    for address in more.got:
        open_sender(second, address).send(Message(body=address), timeout=10)
    wait_for(lambda: all(more.got[a] == [a] for a in more.got), 10,
             what="anycast and multicast from router 2 at router 3")
    more.close()

    # A change while router 1 is down reaches the others at once; the space is not Active
    # until router 1 has it too, and says which router it waits for.
    add(space, "later", "anycast", "standard-small-anycast")
    sync(space)
    later = phases(space)["later"]
    assert later.phase != "Active" and "maas-router-1" in " ".join(later.messages)
    newest = Collector(url_of(third), space, ("later",))
    wait_for(lambda: consumers_seen(mesh.routers[1], space, ("later",)), 10,
             what="router 2 knowing the new address's receiver")
    open_sender(second, "later").send(Message(body="new"), timeout=10)
    wait_for(lambda: newest.got["later"] == ["new"], 10, what="the new address's message")
    newest.close()
    second.close()

    # Router 1 restarts empty: the watch restores the space on it, and its clients work again.
    first.start()
    wait_for(lambda: len(nodes(first)) == 3, 30, what="router 1 back in the mesh")
    result = router_watch.tick(*(f"amqp://127.0.0.1:{r.mgmt_port}" for r in mesh.routers))
    assert result.restarted and result.restored == 1
    assert {a: s.phase for a, s in phases(space).items()} == \
        dict.fromkeys([*ADDRESSES, "later"], "Active")
    again = connect(url_of(first), space)
    open_sender(again, "orders").send(Message(body="after"), timeout=10)
    wait_for(lambda: "after" in collector.got["orders"], 10, what="router 1's client heard")
    again.close()
    collector.close()


def test_the_routers_links_take_only_the_mesh_cas_certificates(mesh_space, tmp_path):
    _, mesh = mesh_space
    port = mesh.routers[0].inter_router_port
    with pytest.raises(ConnectionException):  # plain text: refused
        BlockingConnection(f"amqp://127.0.0.1:{port}", timeout=5)
    # A certificate of another CA, however well formed, is refused too.
    from workers.agents.router.certificates import ensure_internal_certificates

    ca, cert, key = ensure_internal_certificates(str(tmp_path / "other-ca"), ["intruder"])["intruder"]
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_credentials(cert, key, None)
    domain.set_trusted_ca_db(mesh.routers[0].mesh_tls.ca)
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER)
    with pytest.raises(ConnectionException):
        BlockingConnection(f"amqps://127.0.0.1:{port}", ssl_domain=domain, timeout=5,
                           allowed_mechs="EXTERNAL")
    # The router's own side is the mesh CA's: a client checking against it gets through TLS.
    context = ssl.create_default_context(cafile=mesh.routers[0].mesh_tls.ca)
    context.load_cert_chain(mesh.routers[1].mesh_tls.cert, mesh.routers[1].mesh_tls.key)
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        assert tls.version() in ("TLSv1.2", "TLSv1.3")


WHERE: dict = {}  # space uid -> SpaceEndpoints, read by `own_routers`


def own_routers(space):
    """MAAS_SPACE_ENDPOINTS for the test below: the space's routers as the Kubernetes backend
    lists a space's replicas, each with the routers before it as its peers."""
    return WHERE[space.uid]


def connector_ids(router) -> set:
    mgmt = management(router)
    try:
        return {(row["name"], row["identity"]) for row in mgmt.query(rc.CONNECTOR, [
            "name", "identity", "role"]) if row.get("role") == "inter-router"}
    finally:
        mgmt.close()


def test_the_agent_links_a_space_s_own_routers_into_a_mesh(tenant, settings, tmp_path):
    """On Kubernetes the replicas' static configuration has the inter-router listener and its
    TLS but no connectors: the router agent connects each router to those before it, and
    reports the space Active once every router has the space."""
    space = services.create_address_space(
        ctx=CTX, tenant=tenant, name=f"own{uuid.uuid4().hex[:5]}", type="standard",
        plan="standard-medium")
    add(space, "jobs", "anycast", "standard-small-anycast")
    user(space)
    settings.MAAS_ROUTER_ADMIN_USER, settings.MAAS_ROUTER_ADMIN_PASSWORD = "admin", ADMIN_PASSWORD
    auth = AuthService()
    mesh = Mesh(2, auth.port, str(tmp_path / "mesh-tls"), tenant_vhost=space.vhost,
                linked=False)
    try:
        mesh.start()
        assert [len(nodes(r)) for r in mesh.routers] == [1, 1]  # not linked yet
        broker = endpoints.shared_broker()
        WHERE[space.uid] = endpoints.SpaceEndpoints(broker, tuple(
            endpoints.RouterEndpoint(f"amqp://127.0.0.1:{r.mgmt_port}", "admin", ADMIN_PASSWORD,
                                     r.router_id, tuple(("127.0.0.1", p.inter_router_port)
                                                        for p in mesh.routers[:i]))
            for i, r in enumerate(mesh.routers)))
        settings.MAAS_SPACE_ENDPOINTS = "tests.workers.test_router_mesh.own_routers"
        sync(space)
        assert phases(space)["jobs"].phase == "Active"
        wait_for(lambda: all(len(nodes(r)) == 2 for r in mesh.routers), 30,
                 what="the agent's connector linking the two routers")
        collector = Collector(url_of(mesh.routers[1]), space, ("jobs",))
        wait_for(lambda: consumers_seen(mesh.routers[0], space, ("jobs",)), 10,
                 what="router 1 knowing router 2's receiver")
        sender = connect(url_of(mesh.routers[0]), space)
        open_sender(sender, "jobs").send(Message(body="across"), timeout=10)
        wait_for(lambda: collector.got["jobs"] == ["across"], 10, what="the message across")
        sender.close()
        collector.close()
        linked = connector_ids(mesh.routers[1])
        assert len(linked) == 1
        sync(space)  # a second run (a drift check) finds the link as desired: left alone
        assert phases(space)["jobs"].phase == "Active"
        assert connector_ids(mesh.routers[1]) == linked
        services.delete_address_space(ctx=CTX, space=space)
        sync(space)
    finally:
        close_pooled()
        WHERE.pop(space.uid, None)
        mesh.stop()
        auth.stop()
