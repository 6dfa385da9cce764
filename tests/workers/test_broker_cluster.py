"""A broker that survives a node (docs/storage.md, "A broker that survives a node"): three
RabbitMQ nodes clustered by deploy/local/rabbitmq-nodes.sh (maas6..maas8, no other test uses
them) are one broker of the pool (MAAS_RABBITMQ_CLUSTER=6-8). A brokered and a standard space
placed on it get quorum queues; with messages flowing into both, the node every client went to
is SIGKILLed: the relays take the clients and the embedded router's connector to another node,
the management API's calls go to another node, no acknowledged message is lost, and both spaces
stay Active."""
import os
import signal
import subprocess
import sys
import threading
import uuid
from urllib.parse import quote

import pytest
import requests
from proton import ConnectionException, Message, Timeout
from proton.utils import BlockingConnection, LinkDetached, SendException

from config_service import brokers, services
from config_service.models import AddressSpace
from config_service.status import address_status, agent_states, space_status
from core.amqp import open_receiver, open_sender
from maas import health
from tests.conftest import CTX, wait_for
from tests.router.conftest import ROOT, free_port, terminate, wait_port
from tests.workers.conftest import sync
from tests.workers.test_standard_space_e2e import PASSWORD, add, user
from workers import readings

# Not `serial`: its nodes are its own (no other test uses maas6..maas8), so it runs beside the
# others, on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
SCRIPT = ROOT / "deploy" / "local" / "rabbitmq-nodes.sh"
FIRST, LAST = 6, 8
SENT = 120  # per space; the node is killed after KILL_AFTER of them
KILL_AFTER = 40
PACE = 0.05  # seconds between a publisher's messages: 6 s of flow


def node(k: int) -> str:
    host = subprocess.run(["rabbitmqctl", "-q", "eval", "node()."], check=True, timeout=60,
                          capture_output=True, text=True).stdout.strip().split("@", 1)[1]
    return f"maas{k}@{host.strip(chr(39))}"


@pytest.fixture(scope="module")
def cluster():
    subprocess.run(["bash", str(SCRIPT), "cluster", str(FIRST), str(LAST)], check=True,
                   timeout=600)
    yield
    # the nodes go back to nothing: a later run clusters them anew
    subprocess.run(["bash", str(SCRIPT), "reset-nodes", str(FIRST), str(LAST)], check=False,
                   timeout=600)


class Relay:
    """`python -m dataplane.vhost_relay` as runplatform starts it for a cluster: its first
    node, then the others (--more-broker)."""

    def __init__(self, protocol: str, port: int, broker: brokers.BrokerEndpoint):
        from maas.management.commands.runplatform import relay_to_broker_args, router_facing_args

        # facing the routers as runplatform has it (TLS where the nodes have it); the
        # tenants' relay plain on this side, as the test's clients connect
        listen = (router_facing_args("127.0.0.1", port, broker) if protocol == "amqp"
                  else ["--listen", f"127.0.0.1:{port}"])
        cmd = [sys.executable, "-m", "dataplane.vhost_relay", "--protocol", protocol, *listen,
               *relay_to_broker_args(broker, "amqp")]
        if protocol == "brokered-amqp":
            cmd += ["--api-url", broker.api_url]
        self.port = port
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        wait_port(port, process=self.proc)

    def stop(self) -> None:
        terminate(self.proc)


@pytest.fixture
def on_cluster(cluster, settings, tenant):
    settings.MAAS_RABBITMQ_CLUSTER = f"{FIRST}-{LAST}"
    (_, broker), made = brokers.broker_pool(), []

    def create(kind: str, plan: str) -> AddressSpace:
        while True:  # placement takes the broker with the fewest spaces: the cluster soon
            space = services.create_address_space(ctx=CTX, tenant=tenant,
                                                  name=f"cl{uuid.uuid4().hex[:6]}", type=kind,
                                                  plan=plan)
            made.append(space)
            if space.broker == "cluster":
                return space

    # the routers' relay on the cluster's port; the brokered spaces' clients' (which the test
    # settings leave out, MAAS_BROKERED_AMQP_PORT=0) on a free one
    relays = []
    try:
        relays.append(Relay("amqp", broker.relay_port, broker))
        relays.append(Relay("brokered-amqp", free_port(), broker))
        yield broker, create, relays[1].port
    finally:
        for relay in relays:
            relay.stop()
        for space in made:
            services.delete_address_space(ctx=CTX, space=space)
            sync(space)


def connect(url: str, hostname: str, username: str) -> BlockingConnection:
    return BlockingConnection(url, user=username, password=PASSWORD, allowed_mechs="PLAIN",
                              allow_insecure_mechs=True, timeout=10, virtual_host=hostname)


class Publisher(threading.Thread):
    """Sends SENT numbered messages to `address`, each until it is accepted (the broker has
    it), reconnecting when its connection goes: a message in flight then is sent again."""

    def __init__(self, url: str, hostname: str, username: str, address: str):
        super().__init__(daemon=True)
        self.url, self.hostname, self.username, self.address = url, hostname, username, address
        self.accepted: set[int] = set()
        self.reconnects, self.error = 0, None
        self.progress = threading.Event()  # set once KILL_AFTER are accepted
        self.pace = threading.Event()  # never set: a sleep

    def run(self) -> None:
        conn = sender = None
        try:
            for i in range(SENT):
                for _ in range(100):
                    try:
                        if sender is None:
                            conn = connect(self.url, self.hostname, self.username)
                            sender = open_sender(conn, self.address)
                        sender.send(Message(id=i, body=i, durable=True), timeout=10)
                        self.accepted.add(i)
                        break
                    except (ConnectionException, LinkDetached, Timeout, SendException):
                        self.reconnects += 1
                        try:
                            conn and conn.close()
                        except Exception:  # noqa: BLE001 - it is gone already
                            pass
                        conn = sender = None
                        threading.Event().wait(0.2)  # the relay finds another node meanwhile
                else:
                    raise AssertionError(f"message {i} never accepted")
                if len(self.accepted) >= KILL_AFTER:
                    self.progress.set()
                self.pace.wait(PACE)  # a steady flow, so that the node dies mid-stream
            conn.close()
        except Exception as exc:  # noqa: BLE001 - reported to the test
            self.error = exc
            self.progress.set()


def drain(url: str, hostname: str, username: str, address: str, want: set) -> list:
    """Receives from `address` until every number of `want` came (or 60 s passed)."""
    got: list = []
    conn = connect(url, hostname, username)
    receiver = open_receiver(conn, address, credit=SENT * 2)

    def all_in() -> bool:
        try:
            while True:
                got.append(receiver.receive(0.2).body)
                receiver.accept()
        except Timeout:
            pass
        return want <= set(got)

    wait_for(all_in, 60, interval=0, what=f"every accepted message of {address}")
    conn.close()
    return got


def states(space) -> tuple:
    space = AddressSpace.objects.get(uid=space.uid)
    agents = agent_states([space.uid]).get(space.uid, {})
    return (space_status(space, agents).phase,
            {a.address: address_status(space, a, agents).phase for a in space.addresses.all()})


def test_a_node_killed_under_load_loses_no_acknowledged_message(router, on_cluster):
    broker, create, brokered_port = on_cluster
    brokered = create("brokered", "brokered-single-broker")
    standard = create("standard", "standard-medium")
    add(brokered, "orders", "queue", "brokered-queue")
    add(standard, "orders", "queue", "standard-small-queue")
    for space in (brokered, standard):
        user(space)
        sync(space)
        assert states(space) == ("Active", {"orders": "Active"})
        # a quorum queue: on every node of the cluster, not on one
        queue = requests.get(
            f"{broker.api_url.split(',')[0]}/queues/{quote(space.vhost, safe='')}/orders",
            auth=(broker.api_user, broker.api_password), timeout=10).json()
        assert queue["type"] == "quorum" and len(queue["members"]) == LAST - FIRST + 1

    # brokered: the relay that takes the space from the login; standard: the router
    clients = {
        "brokered": (f"amqp://127.0.0.1:{brokered_port}", f"vhost:{brokered.vhost}",
                     f"app@{brokered.vhost}"),
        "standard": (f"amqp://127.0.0.1:{router.amqp_port}", standard.vhost,
                     f"app@{standard.vhost}")}
    publishers = {name: Publisher(*where, "orders") for name, where in clients.items()}
    for publisher in publishers.values():
        publisher.start()
    for publisher in publishers.values():
        assert publisher.progress.wait(60)
    # the node the relays took every client to (the first): SIGKILL, mid-stream
    pid = int(subprocess.run(["rabbitmqctl", "-q", "-n", node(FIRST), "eval", "os:getpid()."],
                             check=True, timeout=60, capture_output=True,
                             text=True).stdout.strip().strip('"'))
    os.kill(pid, signal.SIGKILL)
    for publisher in publishers.values():
        publisher.join(240)
        assert publisher.error is None, publisher.error
        assert len(publisher.accepted) == SENT

    for name, publisher in publishers.items():
        got = drain(*clients[name], "orders", publisher.accepted)
        lost = publisher.accepted - set(got)
        print(f"{name}: {SENT} accepted, {len(lost)} lost, {len(got) - len(set(got))} "
              f"duplicates, {publisher.reconnects} reconnects")
        assert lost == set()
    assert sum(p.reconnects for p in publishers.values()) >= 1  # they did lose the node

    # The storage controller reaches the cluster through another node: still Active; the
    # readiness check and the portal's counters read it there too.
    for space in (brokered, standard):
        sync(space)
        assert states(space) == ("Active", {"orders": "Active"})
    health._rabbitmq(broker)  # raises if no node answers
    assert "orders" in readings._broker_rows(broker, brokered.vhost)
