"""Faults under load, the small version of issue 16's (tests/bench/bench_faults.py is the full
one): a standard space on the embedded router keeps receiving changes while the agents' worker
is SIGKILLed, the router restarts empty and Redis restarts empty. Afterwards every address is
Active, each event was applied once by every agent it needs, the router and RabbitMQ hold
exactly what the projections say, and no message RabbitMQ acknowledged is lost.

RabbitMQ itself is not restarted here: parallel test runs share it. The bench does, with
`--rabbitmq`. A worker that exits on its own is restarted, as Kubernetes would, and reported as
a warning (see `supervise`)."""
import threading
import time
import uuid
import warnings
from collections import Counter

import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings
from proton import Message, Timeout

from config_service import services
from config_service.models import (
    Address,
    AddressSpace,
    AppliedEvent,
    MessagingUser,
    RouterIncarnation,
)
from config_service.status import address_status, agent_states, agents_needed, space_status
from eventlog.models import ConfigEvent, Outbox
from tests.conftest import CTX, Worker, b64, wait_for
from tests.router.conftest import ADMIN_PASSWORD
from tests.workers.conftest import sync
from workers import endpoints
from workers.agents.router import desired as rc
from workers.agents.router.agent import entity_types
from workers.agents.storage.agent import desired_state, management_api
from workers.clients.qdr import Management
from workers.tasks import relay_outbox, watch_router

pytestmark = pytest.mark.slow

PASSWORD = "app-password"
KINDS = {"queue": "standard-small-queue", "anycast": "standard-small-anycast"}
MESSAGES = 20  # per queue, acknowledged by RabbitMQ before the faults


@pytest.fixture
def worker(transactional_db, redis_server, router):
    """A real Celery worker running every agent, pointed at the module's router."""
    w = Worker(settings.DATABASES["default"]["NAME"],
               MAAS_ROUTER_MANAGEMENT_URL=settings.MAAS_ROUTER_MANAGEMENT_URL,
               MAAS_ROUTER_ADMIN_PASSWORD=settings.MAAS_ROUTER_ADMIN_PASSWORD,
               MAAS_ROUTER_AMQP_PORT=str(router.amqp_port))
    w.start()
    yield w
    w.stop()


@pytest.fixture
def space(transactional_db, tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"f{uuid.uuid4().hex[:5]}",
                                      type="standard", plan="standard-medium")
    for name, type_ in (("q0", "queue"), ("q1", "queue"), ("a0", "anycast"), ("a1", "anycast")):
        services.create_address(ctx=CTX, space=s, address=name, type=type_, plan=KINDS[type_])
    services.create_messaging_user(
        ctx=CTX, space=s, username="app",
        authentication={"type": "password", "password": b64(PASSWORD)},
        authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
    yield s
    services.delete_address_space(ctx=CTX, space=s)
    sync(s)


class Creates(threading.Thread):
    """Changes that keep arriving through the service functions, as API requests would: an
    address every `interval` seconds, queues and anycast in turn, on a connection of its own."""

    def __init__(self, space, interval: float = 0.1):
        super().__init__(daemon=True)
        self.space, self.interval = space, interval
        self.created: list[str] = []  # accepted: the service function returned
        self.errors: list[Exception] = []
        self.halt = threading.Event()

    def run(self):
        try:
            while not self.halt.wait(self.interval):
                n = len(self.created)
                type_ = "queue" if n % 2 else "anycast"
                services.create_address(ctx=CTX, space=self.space, address=f"live{n}",
                                        type=type_, plan=KINDS[type_])
                self.created.append(f"live{n}")
        except Exception as exc:  # reported by the test, in its own thread
            self.errors.append(exc)
        finally:
            connection.close()

    def stop(self) -> None:
        self.halt.set()
        self.join(30)


def beat() -> None:
    """What Celery beat runs: the router watch and the outbox relay."""
    watch_router()
    relay_outbox()


def supervise(worker, exits: list) -> None:
    """Restarts a worker that exited on its own, as Kubernetes and `runplatform`
    (maas.supervisor) would: on losing Redis, Celery 5.7 / kombu 5.7 at times exit with "Unrecoverable error:
    AttributeError: 'NoneType' object has no attribute 'hostname'" (restoring unacknowledged
    tasks on a connection already released). Reported as a warning, not hidden."""
    if worker.proc.poll() is not None:
        exits.append(worker.proc.returncode)
        worker.start()


def keep_going(seconds: float, supervised=lambda: None) -> None:
    """The platform runs on for a while (beat ticking, `supervised()` too) as changes keep
    arriving."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        supervised()
        beat()
        time.sleep(0.3)


def converged(space) -> bool:
    space = AddressSpace.objects.get(uid=space.uid)
    states = agent_states([space.uid]).get(space.uid, {})
    return (space_status(space, states).phase == "Active"
            and all(address_status(space, a, states).phase == "Active"
                    for a in space.addresses.all())
            and not Outbox.objects.filter(stream_uid=space.uid, acked_at__isnull=True).exists())


def applied_shortfall(space) -> dict:
    """{agent kind: events of the space it has no AppliedEvent for} (zeros: nothing lost)."""
    events = ConfigEvent.objects.filter(stream_id=space.uid).count()
    applied = Counter(AppliedEvent.objects.filter(event__stream_id=space.uid)
                      .values_list("kind", flat=True))
    return {kind: events - applied[kind] for kind in agents_needed(space.type)}


def router_difference(mgmt: Management, space) -> set:
    """(entity type, name) the router holds for the space but the projections do not ask for,
    and the reverse. Names only: the broker login does not change which entities exist."""
    addresses = Address.objects.filter(space=space, scheduled=True)
    users = MessagingUser.objects.filter(space=space)
    desired, _ = rc.desired_entities(space, addresses, users, rc.BrokerLogin("", 0, "", ""))
    prefix = rc.owner_prefix(space.vhost)
    actual = {(etype, row["name"]) for etype in entity_types(mgmt)
              for row in mgmt.query(etype, ["name"], name_prefix=prefix)}
    return actual ^ set(desired)


def broker_difference(space) -> set:
    """Queue names the space's vhost holds on its broker (placement) but the projections do not
    ask for, and the reverse."""
    held = management_api(endpoints.of(space).broker).list_queues(space.vhost, ["name"])
    return {q["name"] for q in held} ^ {q.name for q in desired_state(space).queues}


def connect(router, space):
    return router.connect(f"app@{space.vhost}", PASSWORD, vhost=space.vhost)


def send(router, space, address: str, n: int) -> list[str]:
    """Bodies of `n` messages, each sent once the one before was accepted (acknowledged)."""
    conn = connect(router, space)
    try:
        sender = conn.create_sender(address)
        bodies = [f"{address}-{i}" for i in range(n)]
        for body in bodies:
            sender.send(Message(body=body, durable=True))  # raises unless accepted
        return bodies
    finally:
        conn.close()


def drain(router, space, address: str) -> list[str]:
    """Bodies of every message waiting on the queue, in order: waits long for the messages
    sent, briefly for any more."""
    conn = connect(router, space)
    try:
        receiver = conn.create_receiver(address, credit=MESSAGES + 10)
        bodies = []
        while True:
            try:
                bodies.append(receiver.receive(5 if len(bodies) < MESSAGES else 0.5).body)
            except Timeout:
                return bodies
            receiver.accept()
    finally:
        conn.close()


@override_settings(MAAS_RELAY_AFTER_SECONDS=0)
def test_no_change_and_no_acknowledged_message_is_lost_through_a_killed_worker_router_and_redis(
        router, worker, redis_server, space):
    exits: list = []  # exit codes of the worker where it died on its own

    def supervised() -> None:
        supervise(worker, exits)

    def settled() -> bool:
        supervised()
        beat()
        return converged(space)

    wait_for(settled, 30, interval=0.3, what="the space Active")
    sent = {q: send(router, space, q, MESSAGES) for q in ("q0", "q1")}
    creates = Creates(space)
    creates.start()

    # The worker dies mid fan-out: some changes applied, others queued or being applied.
    wait_for(lambda: len(creates.created) >= 3, 10, what="changes arriving")
    worker.kill()
    keep_going(1)  # unsupervised: it stays dead meanwhile
    worker.start()
    keep_going(1, supervised)
    router.stop()  # back empty: no address, no user, no link to the broker
    keep_going(1, supervised)
    router.start()
    keep_going(1, supervised)
    redis_server.stop()  # the queued reconcile tasks and their pending marks are gone
    keep_going(1, supervised)
    creates.stop()  # what was accepted while Redis was down can reach the agents only by
    redis_server.start()  # the outbox relay

    wait_for(settled, 40, interval=0.3, what="every address Active again")
    if exits:
        warnings.warn(f"the Celery worker exited on its own (codes {exits}) and was restarted: "
                      "see supervise()", stacklevel=1)
    assert not creates.errors
    assert len(creates.created) > 30  # changes did arrive throughout the faults
    assert RouterIncarnation.objects.get().restarts == 1  # the watch saw the router's restart
    names = set(Address.objects.filter(space=space).values_list("address", flat=True))
    assert names == {"q0", "q1", "a0", "a1", *creates.created}
    assert applied_shortfall(space) == {"storage": 0, "router": 0}
    mgmt = Management(settings.MAAS_ROUTER_MANAGEMENT_URL, "admin", ADMIN_PASSWORD)
    try:
        assert router_difference(mgmt, space) == set()
    finally:
        mgmt.close()
    assert broker_difference(space) == set()
    assert {q: drain(router, space, q) for q in sent} == sent
