"""A router that restarts empty: the watch notices it at once, the API stops calling its spaces
Active, and every space is configured again within seconds without any change being made; a
router that did not restart costs no reconcile. Real embedded router, RabbitMQ and agents."""
import datetime
import json
import socket
import time
import uuid

import pytest
from django.conf import settings
from django.utils import timezone
from proton import ConnectionException, Message
from proton.utils import BlockingConnection

from config_service import services
from config_service.models import AddressSpace, AgentState, RouterIncarnation
from config_service.status import address_status, agent_states, space_status
from dataplane.authservice import sasl
from eventlog.models import ConfigEvent
from tests.authservice.test_hostile_peers import sasl_init
from tests.conftest import CTX, Worker, b64, wait_for
from tests.router.conftest import ADMIN_PASSWORD, pump_until
from tests.workers.conftest import sync
from workers import dispatch
from workers.agents.router import watch as router_watch
from workers.tasks import watch_router

BOTH_ROUTERS = True  # tests/workers/conftest.py: the embedded router and qdrouterd
PASSWORD = "app-password"


def new_space(tenant):
    space = services.create_address_space(ctx=CTX, tenant=tenant,
                                          name=f"rw{uuid.uuid4().hex[:5]}",
                                          type="standard", plan="standard-medium")
    services.create_address(ctx=CTX, space=space, address="rpc", type="anycast",
                            plan="standard-small-anycast")
    services.create_address(ctx=CTX, space=space, address="orders", type="queue",
                            plan="standard-small-queue")
    services.create_messaging_user(
        ctx=CTX, space=space, username="app",
        authentication={"type": "password", "password": b64(PASSWORD)},
        authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
    sync(space)
    return space


@pytest.fixture
def spaces(transactional_db, redis_server, tenant, router):
    """Three standard spaces, configured; the restores run in threads with connections of their
    own, so the data is committed (transactional_db)."""
    made = [new_space(tenant) for _ in range(3)]
    yield made
    router_watch.restore()  # a test may leave the router empty: teardown needs no leftovers
    for space in made:
        services.delete_address_space(ctx=CTX, space=space)
        sync(space)


def url() -> str:
    return settings.MAAS_ROUTER_MANAGEMENT_URL


def phases(space) -> dict:
    space = AddressSpace.objects.get(uid=space.uid)
    states = agent_states([space.uid]).get(space.uid, {})
    status = space_status(space, states)
    return {"space": (status.phase, tuple(status.messages)),
            **{a.address: address_status(space, a, states).phase
               for a in space.addresses.all()}}


def active(space) -> bool:
    return phases(space) == {"space": ("Active", ()), "rpc": "Active", "orders": "Active"}


def connect(router, space) -> BlockingConnection:
    return BlockingConnection(f"amqp://127.0.0.1:{router.amqp_port}",
                              user=f"app@{space.vhost}", password=PASSWORD,
                              allowed_mechs="PLAIN", allow_insecure_mechs=True, timeout=5,
                              virtual_host=space.vhost)


def round_trip(router, space, address: str, body: str) -> str:
    cr, cs = connect(router, space), connect(router, space)
    try:
        receiver = cr.create_receiver(address, credit=1)
        sender = cs.create_sender(address)
        pump_until(lambda: sender.link.credit > 0, cs, cr)  # anycast: once a consumer has some
        sender.link.send(Message(body=body))  # unsettled until the receiver accepts it
        pump_until(lambda: len(receiver.fetcher.incoming) == 1, cs, cr)
        message = receiver.receive(5)
        receiver.accept()
        return message.body
    finally:
        cs.close()
        cr.close()


def send_acknowledged(router, space, address: str, body: str) -> None:
    """Sends one message and waits until the router settles it as accepted (for a queue: once
    the broker took it)."""
    conn = connect(router, space)
    try:
        conn.create_sender(address).send(Message(body=body, durable=True), timeout=5)
    finally:
        conn.close()


def receive_one(router, space, address: str) -> str:
    conn = connect(router, space)
    try:
        receiver = conn.create_receiver(address, credit=1)
        message = receiver.receive(10)
        receiver.accept()
        return message.body
    finally:
        conn.close()


def sasl_outcome(router, space) -> int:
    """The sasl-outcome code the router gives the space's messaging user."""
    sock = socket.create_connection(("127.0.0.1", router.amqp_port), timeout=5)
    try:
        sock.sendall(sasl.SASL_HEADER + sasl_init(
            "PLAIN", f"\0app@{space.vhost}\0{PASSWORD}".encode()))
        received = b""
        while True:  # until the outcome: a router that accepts keeps the connection open
            received += sock.recv(65536)
            outcomes = [f for f in whole_frames(received) if f.code == sasl.OUTCOME]
            if outcomes:
                return outcomes[0].field(0)
    finally:
        sock.close()


def whole_frames(received: bytes) -> list:
    """The SASL frames complete so far, after the header."""
    out, rest = [], received[len(sasl.SASL_HEADER):]
    while len(rest) >= 8 and len(rest) >= (size := int.from_bytes(rest[:4], "big")):
        out.append(sasl.decode(rest[8:size]))
        rest = rest[size:]
    return out


def router_states(spaces) -> dict:
    return {s.space_uid: (s.applied_at, s.invalidated)
            for s in AgentState.objects.filter(kind="router",
                                               space_uid__in=[x.uid for x in spaces])}


def test_a_space_is_not_active_while_its_router_configuration_is_missing(router, spaces):
    space = spaces[0]
    assert router_watch.detect(url()) == (False, 0)  # the watch knows this run of the router
    assert active(space)
    router.restart()  # back empty
    with pytest.raises(ConnectionException):
        connect(router, space)  # "Authentication failed": the router forgot the user
    assert router_watch.detect(url()) == (True, 3)
    assert phases(space) == {
        "space": ("Configuring", ("Router restarted; configuration being restored",)),
        "rpc": "Configuring", "orders": "Configuring"}
    # Its clients are refused as a transient failure, which they retry, once the auth service
    # read the invalidation (every second), and the space is asked to be restored first.
    # qdrouterd 1.19 passes any refusal of its auth service on as `auth` (remote_sasl.c).
    refused = sasl.SYS_TEMP if router.kind == "embedded" else sasl.AUTH

    def refused_and_asked() -> bool:
        asked = dispatch._redis().zscore(router_watch.WANTED_KEY, space.vhost) is not None
        return sasl_outcome(router, space) == refused and asked

    wait_for(refused_and_asked, 10, what="a transient refusal, the space asked first")
    assert router_watch.restore() == (3, 0)
    assert active(space)
    wait_for(lambda: sasl_outcome(router, space) == sasl.OK, 3, what="sasl ok once restored")
    assert round_trip(router, space, "rpc", "after restore") == "after restore"


def test_the_watch_restores_every_space_within_seconds_without_any_change(router, spaces):
    watch_router()  # the beat's first tick records this run of the router
    events = ConfigEvent.objects.count()
    for space in spaces:  # acknowledged by the broker before the restart
        send_acknowledged(router, space, "orders", f"before the restart {space.name}")
    router.restart()
    restarted = time.monotonic()

    def all_active() -> bool:
        watch_router()  # what Celery beat runs every MAAS_ROUTER_WATCH_INTERVAL
        return all(active(s) for s in spaces)

    wait_for(all_active, 10, interval=settings.MAAS_ROUTER_WATCH_INTERVAL,
             what="every space Active again")
    assert time.monotonic() - restarted < 10
    assert ConfigEvent.objects.count() == events  # nobody changed anything
    assert RouterIncarnation.objects.get().restarts == 1
    for space in spaces:  # users authenticate again; nothing acknowledged was lost
        assert receive_one(router, space, "orders") == f"before the restart {space.name}"
        assert round_trip(router, space, "rpc", "hello") == "hello"
        assert round_trip(router, space, "orders", "stored") == "stored"


def test_a_router_that_did_not_restart_causes_no_reconciles(router, spaces):
    first = router_watch.tick(url())
    before = router_states(spaces)
    later = [router_watch.tick(url()) for _ in range(3)]
    assert (first.restarted, first.invalidated, first.restored) == (False, 0, 0)
    assert all((t.reachable, t.restarted, t.restored) == (True, False, 0) for t in later)
    assert router_states(spaces) == before  # not reconciled: applied_at did not move


def test_a_new_watch_restores_what_was_applied_before_the_router_it_first_sees_started(
        router, spaces):
    an_hour_ago = timezone.now() - datetime.timedelta(hours=1)
    AgentState.objects.filter(kind="router").update(applied_at=an_hour_ago)
    router.restart()  # while no watch ran: there is no record of the earlier run
    result = router_watch.tick(url())
    assert (result.restarted, result.invalidated, result.restored) == (False, 3, 3)
    assert all(active(s) for s in spaces)
    assert round_trip(router, spaces[0], "rpc", "restored") == "restored"


def test_the_resync_leaves_invalidated_spaces_to_a_live_watch_and_queues_them_without_one(
        router, spaces):
    from workers.tasks import resync_candidates

    router_watch.detect(url())
    router.restart()
    router_watch.detect(url())  # invalidated; say the watch stops before it restores them
    uids = {s.uid for s in spaces}
    assert uids.isdisjoint(resync_candidates(timezone.now())[0])
    an_hour_later = timezone.now() + datetime.timedelta(hours=1)
    assert uids <= set(resync_candidates(an_hour_later)[0])


def test_a_second_restart_before_the_restore_renews_the_invalidation(router, spaces):
    router_watch.detect(url())
    router.restart()
    assert router_watch.detect(url()) == (True, 3)
    first = {s.space_uid: s.invalidated_at for s in AgentState.objects.filter(kind="router")}
    router.restart()  # again, before the watch restored anything
    assert router_watch.detect(url()) == (True, 0)  # none newly invalidated...
    again = {s.space_uid: s.invalidated_at for s in AgentState.objects.filter(kind="router")}
    # ...but a restore already running against the first new run cannot clear them any more.
    assert all(again[uid] > first[uid] for uid in first)
    assert router_watch.restore() == (3, 0)
    assert all(active(s) for s in spaces)


def test_the_spaces_whose_clients_wait_are_restored_first(router, spaces, settings):
    router_watch.detect(url())
    router.restart()
    assert router_watch.detect(url()) == (True, 3)
    router_watch.ask_first([spaces[2].vhost])  # what the auth service does on a client's login
    settings.MAAS_ROUTER_RESTORE_CONCURRENCY = 1
    assert router_watch.restore() == (3, 0)
    applied = {s.space_uid: s.applied_at for s in AgentState.objects.filter(kind="router")}
    assert applied[spaces[2].uid] < min(applied[spaces[0].uid], applied[spaces[1].uid])


def test_a_change_made_while_the_router_is_down_is_retried_every_second_and_applied(
        router, spaces, tmp_path):
    """A real Celery worker tries a change again within a second while the router is down (not
    after Celery's doubling backoff, which made a change made during a restart wait seconds
    after the router was back), and applies it once the router listens again."""
    space = spaces[0]
    log = tmp_path / "worker.log"
    env = {"MAAS_ROUTER_MANAGEMENT_URL": url(), "MAAS_ROUTER_ADMIN_PASSWORD": ADMIN_PASSWORD,
           "MAAS_ROUTER_AMQP_PORT": str(router.amqp_port)}
    if router.relay is not None:
        env["MAAS_VHOST_RELAY_PORT"] = str(router.relay.port)
    worker = Worker(settings.DATABASES["default"]["NAME"], log_path=log, **env)
    router.stop()
    worker.start()

    def tries() -> list[dict]:
        lines = log.read_text().splitlines() if log.exists() else []
        return [line for line in (json.loads(x) for x in lines if '"agent.retry"' in x)
                if line.get("space") == str(space.uid)]

    try:
        address = services.create_address(ctx=CTX, space=space, address="late", type="anycast",
                                           plan="standard-small-anycast")
        wait_for(lambda: len(tries()) >= 5, 60, what="five tries of the change")
        router.start()
        wait_for(lambda: address_status(space, address, agent_states([space.uid])[space.uid])
                 .phase == "Active", 30, what="the change applied once the router is back")
    finally:
        worker.stop()
    countdowns = [line["countdown"] for line in tries()]
    assert [line["retries"] for line in tries()][:5] == [0, 1, 2, 3, 4]
    assert all(0 < c <= 1.0 for c in countdowns), countdowns
    watch_router()  # the router came back empty: the watch restores the space's users
    wait_for(lambda: phases(space)["space"] == ("Active", ()), 10, what="the space restored")
    assert round_trip(router, space, "late", "made while down") == "made while down"
