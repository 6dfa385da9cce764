"""Standard address spaces end to end: config events -> storage controller and router agent ->
the real embedded router and RabbitMQ -> real proton clients, for every address type."""
import io
import uuid
from urllib.parse import quote

import pytest
from proton import ConnectionException, Delivery, LinkException, Message, Timeout
from proton.utils import BlockingConnection, LinkDetached, SendException

from config_service import services
from config_service.models import Address, AddressSpace
from config_service.status import address_status, agent_states
from core.amqp import open_receiver, open_sender
from tenants.models import AddressSpacePlan
from tests.conftest import CTX, b64, wait_for
from tests.router.conftest import ADMIN_PASSWORD, pump, pump_until
from tests.workers import rabbit
from tests.workers.conftest import sync
from workers.agents.router import agent as router_agent
from workers.agents.router import desired as rc
from workers.clients.qdr import Management

BOTH_ROUTERS = True  # tests/workers/conftest.py: the embedded router and qdrouterd
PASSWORD = "app-password"


@pytest.fixture
def space(tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"std{uuid.uuid4().hex[:5]}",
                                      type="standard", plan="standard-medium")
    yield s
    if AddressSpace.objects.filter(uid=s.uid, terminating=False).exists():
        services.delete_address_space(ctx=CTX, space=s)
        sync(s)


def add(space, address, type_, plan, **kw):
    return services.create_address(ctx=CTX, space=space, address=address, type=type_,
                                   plan=plan, **kw)


def user(space, username="app", rules=None):
    rules = rules or [{"addresses": ["*"], "operations": ["send", "recv"]}]
    return services.create_messaging_user(
        ctx=CTX, space=space, username=username,
        authentication={"type": "password", "password": b64(PASSWORD)}, authorization=rules)


def connect(router, space, username="app", password=PASSWORD) -> BlockingConnection:
    # The AMQP hostname names the space's vhost: qdrouterd's vhost policy and address prefix
    # follow it (the embedded router also takes it from `user@vhost`).
    return BlockingConnection(f"amqp://127.0.0.1:{router.amqp_port}",
                              user=f"{username}@{space.vhost}", password=password,
                              allowed_mechs="PLAIN", allow_insecure_mechs=True, timeout=5,
                              virtual_host=space.vhost)


def phases(space):
    space = AddressSpace.objects.get(uid=space.uid)
    states = agent_states([space.uid]).get(space.uid, {})
    return {a.address: address_status(space, a, states).phase for a in space.addresses.all()}


def wait_for_bindings(space, exchange: str, n: int) -> None:
    """Until RabbitMQ has bound `n` receivers' queues to the topic's exchange (a receiver's
    attach returns before the broker has bound its queue)."""
    vhost = quote(space.vhost, safe="")
    # receivers of `<topic>/<key>` bind to the topic, of the bare topic to its fanout exchange
    paths = [f"/exchanges/{vhost}/{quote(x, safe='')}/bindings/source"
             for x in (exchange, rc.FANOUT_PREFIX + exchange)]

    def bound() -> int:  # receivers get server-named queues; a subscription's queue is not one
        return sum(b["destination"].startswith("amq.gen")
                   for path in paths for b in rabbit.api(path).json())

    wait_for(lambda: bound() >= n, 10, what=f"{n} receivers bound to {exchange}")


def receive_bodies(receiver, n, timeout=5):
    bodies = []
    for _ in range(n):
        bodies.append(receiver.receive(timeout).body)
        receiver.accept()
    return bodies


def test_queue_stores_until_a_consumer_comes_and_survives_a_router_restart(router, space):
    add(space, "orders", "queue", "standard-small-queue")
    user(space)
    sync(space)
    assert phases(space) == {"orders": "Active"}
    conn = connect(router, space)
    sender = conn.create_sender("orders")
    for i in range(3):
        sender.send(Message(body=f"m{i}"))  # returns once the broker accepted it
    conn.close()
    router.restart()  # the router comes back empty
    with pytest.raises(ConnectionException):
        connect(router, space)  # it does not know the user any more
    sync(space)  # the periodic resync
    conn = connect(router, space)
    receiver = conn.create_receiver("orders", credit=10)
    assert receive_bodies(receiver, 3) == ["m0", "m1", "m2"]
    conn.close()


def test_a_queue_whose_name_holds_a_slash_goes_active_and_carries_messages(router, space):
    # RabbitMQ 3.10 reads `/amq/queue/orders/eu` as a path: the router's links name the queue
    # `/amq/queue/orders%2Feu` (config_service/wire.py), and the space's other queue is unharmed.
    add(space, "orders/eu", "queue", "standard-small-queue")
    add(space, "plain", "queue", "standard-small-queue")
    user(space)
    sync(space)
    assert phases(space) == {"orders/eu": "Active", "plain": "Active"}
    conn = connect(router, space)
    conn.create_sender("orders/eu").send(Message(body="to eu"))
    conn.create_sender("plain").send(Message(body="to plain"))
    assert rabbit.api(f"/queues/{quote(space.vhost, safe='')}/orders%2Feu").ok
    assert receive_bodies(conn.create_receiver("orders/eu", credit=5), 1) == ["to eu"]
    assert receive_bodies(conn.create_receiver("plain", credit=5), 1) == ["to plain"]
    conn.close()


def test_two_competing_consumers_share_a_queue(router, space):
    add(space, "work", "queue", "standard-small-queue")
    user(space)
    sync(space)
    c1, c2, cs = connect(router, space), connect(router, space), connect(router, space)
    r1 = c1.create_receiver("work", credit=5)
    r2 = c2.create_receiver("work", credit=5)
    sender = cs.create_sender("work")
    for i in range(10):
        sender.send(Message(body=i))
    pump_until(lambda: len(r1.fetcher.incoming) + len(r2.fetcher.incoming) == 10, c1, c2, cs)
    assert len(r1.fetcher.incoming) == 5 and len(r2.fetcher.incoming) == 5
    for conn in (c1, c2, cs):
        conn.close()


def test_topic_reaches_every_subscriber_and_a_durable_subscription_keeps_messages(
        router, space):
    add(space, "news", "topic", "standard-small-topic")
    add(space, "archive", "subscription", "standard-small-subscription", topic="news")
    user(space)
    sync(space)
    assert set(phases(space).values()) == {"Active"}
    c1, c2, cs = connect(router, space), connect(router, space), connect(router, space)
    r1 = open_receiver(c1, "news", credit=10)
    r2 = open_receiver(c2, "news", credit=10)
    wait_for_bindings(space, "news", 2)
    sender = open_sender(cs, "news")
    sender.send(Message(body="hello", subject="weather"))
    # Settled before the receivers leave: qdrouterd returns what a leaving receiver left
    # unsettled as `modified`, which RabbitMQ 3.10 answers by ending the session all the
    # space's routed links share (docs/router.md, known gaps).
    assert receive_bodies(r1, 1) == ["hello"] and receive_bodies(r2, 1) == ["hello"]
    for conn in (c1, c2):
        conn.close()
    sender.send(Message(body="while away", subject="weather"))  # nobody attached to archive
    cs.close()
    conn = connect(router, space)
    sub = conn.create_receiver("news::archive", credit=10)
    assert receive_bodies(sub, 2) == ["hello", "while away"]
    conn.close()


def test_a_topic_receiver_chooses_its_subtopics_by_key(router, space):
    add(space, "news", "topic", "standard-small-topic")
    user(space)
    sync(space)
    receivers = {}
    conns = [connect(router, space) for _ in range(4)]
    for conn, source in zip(conns, ("news", "news/sports.*", "news/sports.#", "news/weather.rain"),
                            strict=False):
        receivers[source] = open_receiver(conn, source, credit=20)
    wait_for_bindings(space, "news", 4)
    cs = connect(router, space)
    for address, body in (("news/sports.football", "goal"), ("news/sports.tennis.final", "ace"),
                          ("news/weather.rain", "wet"), ("news/weather.sun", "dry")):
        open_sender(cs, address).send(Message(body=body))
    open_sender(cs, "news").send(Message(body="by subject", subject="sports.chess"))

    def got(source, n):
        return sorted(receive_bodies(receivers[source], n))

    assert got("news", 5) == ["ace", "by subject", "dry", "goal", "wet"]
    assert got("news/sports.*", 2) == ["by subject", "goal"]
    assert got("news/sports.#", 3) == ["ace", "by subject", "goal"]
    assert got("news/weather.rain", 1) == ["wet"]
    pump(*conns, seconds=0.5)
    assert [len(r.fetcher.incoming) for r in receivers.values()] == [0, 0, 0, 0]  # nothing else
    for conn in (*conns, cs):
        conn.close()


def test_a_topic_message_without_a_subject_reaches_the_whole_topic_and_its_subscriptions(
        router, space):
    """The common JMS/AMQP case: no subject, no key in the address. RabbitMQ's own topic type
    fails the link; the topic's x-maas-topic exchange routes it as the empty key."""
    add(space, "news", "topic", "standard-small-topic")
    add(space, "archive", "subscription", "standard-small-subscription", topic="news")
    user(space)
    sync(space)
    assert set(phases(space).values()) == {"Active"}
    conns = [connect(router, space) for _ in range(3)]
    whole = [open_receiver(c, "news", credit=10) for c in conns[:2]]
    keyed = open_receiver(conns[2], "news/sports.#", credit=10)
    wait_for_bindings(space, "news", 3)
    cs = connect(router, space)
    sender = open_sender(cs, "news")
    sender.send(Message(body="no subject"))  # returns once RabbitMQ accepted it
    sender.send(Message(body="keyed", subject="sports.chess"))
    assert [receive_bodies(r, 2) for r in whole] == [["no subject", "keyed"]] * 2
    assert receive_bodies(keyed, 1) == ["keyed"]
    pump(*conns, seconds=0.5)
    assert len(keyed.fetcher.incoming) == 0  # the subject-less message is no subtopic's
    for conn in (*conns, cs):
        conn.close()
    conn = connect(router, space)
    sub = conn.create_receiver("news::archive", credit=10)
    assert receive_bodies(sub, 2) == ["no subject", "keyed"]
    conn.close()


def test_anycast_gives_credit_only_with_a_consumer_and_returns_its_outcome(router, space):
    add(space, "rpc", "anycast", "standard-small-anycast")
    user(space)
    sync(space)
    assert phases(space) == {"rpc": "Active"}
    cs, cr = connect(router, space), connect(router, space)
    sender = cs.create_sender("rpc")
    pump(cs, seconds=0.5)
    assert sender.link.credit == 0  # no consumer: no credit
    receiver = cr.create_receiver("rpc", credit=5)
    pump_until(lambda: sender.link.credit > 0, cs, cr)
    delivery = sender.link.send(Message(body="hi"))
    pump_until(lambda: len(receiver.fetcher.incoming) == 1, cs, cr)
    receiver.receive(5)
    receiver.reject()
    pump_until(lambda: delivery.settled, cs, cr)
    assert delivery.remote_state == Delivery.REJECTED
    cs.close()
    cr.close()


def test_multicast_copies_every_message_to_every_consumer(router, space):
    add(space, "events", "multicast", "standard-small-multicast")
    user(space)
    sync(space)
    c1, c2, cs = connect(router, space), connect(router, space), connect(router, space)
    r1 = c1.create_receiver("events", credit=10)
    r2 = c2.create_receiver("events", credit=10)
    sender = cs.create_sender("events")
    pump_until(lambda: sender.link.credit > 0, c1, c2, cs)
    for i in range(3):
        sender.link.send(Message(body=i))
    pump_until(lambda: len(r1.fetcher.incoming) == 3 and len(r2.fetcher.incoming) == 3,
               c1, c2, cs)
    for conn in (c1, c2, cs):
        conn.close()


def test_rejected_and_expired_messages_end_up_on_the_deadletter_address(router, space):
    add(space, "dlq", "deadletter", "standard-deadletter")
    add(space, "jobs", "queue", "standard-small-queue", deadletter="dlq", expiry="dlq")
    add(space, "short", "queue", "standard-small-queue", expiry="dlq",
        spec={"messageTtl": {"maximum": 200}})
    user(space)
    sync(space)
    conn = connect(router, space)
    conn.create_sender("jobs").send(Message(body="bad job"))
    receiver = conn.create_receiver("jobs", credit=1)
    receiver.receive(5)
    receiver.reject()
    conn.create_sender("short").send(Message(body="too late"))
    dead = conn.create_receiver("dlq", credit=10)  # receive_bodies waits for the expiry
    assert sorted(receive_bodies(dead, 2)) == ["bad job", "too late"]
    conn.close()


def test_authorization_is_enforced_with_amqp_conditions(router, space, tenant):
    add(space, "orders", "queue", "standard-small-queue")
    user(space, "reader", [{"addresses": ["orders"], "operations": ["recv"]}])
    other = services.create_address_space(ctx=CTX, tenant=tenant, name=f"o{space.name}",
                                          type="standard", plan="standard-small")
    user(other, "intruder")
    sync(space)
    sync(other)
    conn = connect(router, space, "reader")
    with pytest.raises(LinkDetached, match="unauthorized-access"):
        conn.create_sender("orders")
    conn.close()
    with pytest.raises(ConnectionException):
        connect(router, space, "reader", "wrong-password")
    # A user of another space (same or other tenant) cannot log in to this one.
    with pytest.raises(ConnectionException):
        BlockingConnection(f"amqp://127.0.0.1:{router.amqp_port}",
                           user=f"intruder@{space.vhost}", password=PASSWORD,
                           allowed_mechs="PLAIN", allow_insecure_mechs=True, timeout=5)
    services.delete_address_space(ctx=CTX, space=other)
    sync(other)


def test_per_space_limits_refuse_with_resource_limit_exceeded(router, tenant):
    # The operator's limits, through the space's plan (a tenant's spec cannot set them).
    small = AddressSpacePlan.objects.get(name="standard-small")
    plan = AddressSpacePlan.objects.create(
        name=f"limited-{uuid.uuid4().hex[:4]}", address_space_type="standard",
        resource_limits=small.resource_limits,
        router_policy={"maxConnections": 1, "maxReceivers": 1})
    plan.address_plans.set(small.address_plans.all())
    s = services.create_address_space(
        ctx=CTX, tenant=tenant, name=f"lim{uuid.uuid4().hex[:4]}", type="standard",
        plan=plan.name)
    add(s, "rpc", "anycast", "standard-small-anycast")
    user(s)
    sync(s)
    conn = connect(router, s)
    conn.create_receiver("rpc", credit=1, name="first")
    with pytest.raises(LinkDetached, match="resource-limit-exceeded"):
        conn.create_receiver("rpc", credit=1, name="second")
    with pytest.raises(ConnectionException, match="resource-limit-exceeded"):
        connect(router, s)
    conn.close()
    services.delete_address_space(ctx=CTX, space=s)
    sync(s)


def test_a_user_of_another_tenant_cannot_attach(router, space, outsider):
    from tenants.models import Tenant

    theirs = Tenant.objects.filter(memberships__user=outsider).first()
    other = services.create_address_space(ctx=CTX, tenant=theirs, name=space.name,
                                          type="standard", plan="standard-small")
    add(space, "orders", "queue", "standard-small-queue")
    user(other, "app")  # same username and password, other tenant
    sync(other)
    sync(space)
    with pytest.raises(ConnectionException):
        connect(router, space)  # their credentials are not valid in our space
    conn = connect(router, other)
    try:  # and our addresses do not exist in theirs:
        sender = conn.create_sender("orders")
    except LinkDetached as refused:
        assert "not-found" in str(refused)  # the embedded router refuses unknown addresses
    else:  # qdrouterd attaches to `<their vhost>/orders`, which nobody consumes: no credit
        with pytest.raises(Timeout):
            sender.send(Message(body="for their orders"), timeout=1)
    conn.close()
    ours = rabbit.api(f"/queues/{quote(space.vhost, safe='')}/orders").json()
    assert ours.get("messages", 0) == 0
    services.delete_address_space(ctx=CTX, space=other)
    sync(other)


def test_the_router_agent_creates_changes_and_deletes_only_its_entities(router, space):
    add(space, "q", "queue", "standard-small-queue")
    add(space, "a", "anycast", "standard-small-anycast")
    sync(space)
    mgmt = Management(f"amqp://127.0.0.1:{router.mgmt_port}", "admin", ADMIN_PASSWORD)
    foreign = ("org.apache.qpid.dispatch.router.config.address", "someone-else")
    mgmt.create(foreign[0], foreign[1], {"prefix": "elsewhere/x"})

    def owned():
        prefix = rc.owner_prefix(space.vhost)
        return {(t, row["name"]) for t in router_agent.entity_types(mgmt)
                for row in mgmt.query(t) if row["name"].startswith(prefix)}

    before = owned()
    assert any(k[1].endswith("autolink:q:out") for k in before)
    services.update_address(ctx=CTX, space=space, name=f"{space.name}.q",
                            plan="standard-medium-queue")
    sync(space)
    assert owned() == before  # a plan change keeps the same router configuration
    services.delete_address(ctx=CTX, space=space, name=f"{space.name}.q")
    sync(space)
    assert not any("autolink:q" in k[1] for k in owned())
    assert any(k[1].endswith("address:a") for k in owned())
    services.delete_address_space(ctx=CTX, space=space)
    sync(space)
    assert owned() == set()
    assert [r["name"] for r in mgmt.query(foreign[0]) if r["name"] == foreign[1]] == [foreign[1]]
    mgmt.delete(*foreign)
    mgmt.close()
    assert not Address.objects.filter(space__uid=space.uid).exists()


def test_the_msg_command_sends_and_receives_through_the_router(router, space, tenant):
    from django.core.management import CommandError, call_command

    add(space, "cli", "queue", "standard-small-queue")
    user(space)
    sync(space)
    common = ["--tenant", tenant.slug, "--space", space.name, "--address", "cli",
              "--user", "app", "--password", PASSWORD]
    out = io.StringIO()
    call_command("msg", "send", *common, "--body", "hi", "--count", "2", stdout=out)
    assert "sent 2" in out.getvalue()
    out = io.StringIO()
    call_command("msg", "receive", *common, "--count", "2", stdout=out)
    assert out.getvalue().split("\n")[:2] == ["hi 1", "hi 2"]
    with pytest.raises(CommandError, match="refused"):
        call_command("msg", "send", *common[:-1], "wrong-password")


def test_the_msg_command_receives_a_multicast_copy(router, space, tenant):
    """Copies may come pre-settled (the embedded router's multicast): nothing to accept."""
    import threading

    from django.core.management import call_command

    add(space, "events", "multicast", "standard-small-multicast")
    user(space)
    sync(space)
    common = ["--tenant", tenant.slug, "--space", space.name, "--address", "events",
              "--user", "app", "--password", PASSWORD]
    out, failed = io.StringIO(), []

    def receive():
        try:
            call_command("msg", "receive", *common, "--timeout", "10", stdout=out)
        except Exception as exc:  # reported below, in the test's thread
            failed.append(exc)

    receiver = threading.Thread(target=receive)
    receiver.start()
    for _ in range(40):  # a multicast copy reaches only receivers already attached
        call_command("msg", "send", *common, "--body", "to all", stdout=io.StringIO())
        receiver.join(0.25)
        if not receiver.is_alive():
            break
    receiver.join(10)
    assert not failed and out.getvalue().startswith("to all"), (failed, out.getvalue())


def test_a_refusal_by_the_router_shows_in_the_address_status(router, space):
    """Another entity holds the prefix the agent needs: the router's own error (both routers
    answer `400 Already exists`) is in the address's messages, not only in a log."""
    mgmt = Management(f"amqp://127.0.0.1:{router.mgmt_port}", "admin", ADMIN_PASSWORD)
    squatter = (rc.ADDRESS, f"someone-else-{space.name}")
    mgmt.create(*squatter, {"prefix": f"{space.vhost}/orders", "distribution": "balanced"})
    add(space, "orders", "anycast", "standard-small-anycast")
    add(space, "events", "multicast", "standard-small-multicast")
    sync(space)
    space = AddressSpace.objects.get(uid=space.uid)
    states = agent_states([space.uid]).get(space.uid, {})
    orders = address_status(space, space.addresses.get(address="orders"), states)
    assert orders.phase == "Configuring"
    assert any("Router refused address" in m and "400 Already exists" in m
               for m in orders.messages), orders.messages
    assert phases(space)["events"] == "Active"  # the rest of the space is configured
    mgmt.delete(*squatter)
    mgmt.close()
    sync(space)
    assert phases(space)["orders"] == "Active"


def management_answers(conn, target: str | None, to: str | None = None) -> bool:
    """Whether a QUERY sent to `target` (or by an anonymous sender, to `to`) is answered."""
    try:
        replies = conn.create_receiver(None, dynamic=True)
        sender = open_sender(conn, target) if target else conn.create_sender(None)
        sender.send(Message(body={"attributeNames": ["name"]}, address=to,
                            reply_to=replies.remote_source.address, properties={
                                "operation": "QUERY",
                                "entityType": "org.apache.qpid.dispatch.listener"}), timeout=2)
        replies.receive(2)
        return True
    except (LinkException, SendException, Timeout, ConnectionException):
        return False  # refused, rejected or unanswered


@pytest.mark.parametrize("grant", ["*", "news/*"])
def test_no_grant_reaches_the_routers_management(router, space, grant):
    """qdrouterd checks a link's address against the policy as written but routes it after
    dropping a `scheme:/` head: `news/x:/_local/$management` must still go nowhere."""
    user(space, rules=[{"addresses": [grant], "operations": ["send", "recv"]}])
    sync(space)
    for target, to in [("news/x:/_local/$management", None), ("x:/_local/$management", None),
                       ("_local/$management", None), ("$management", None),
                       ("_topo/0/maas-test/$management", None), ("//r/_local/$management", None),
                       (None, "news/x:/_local/$management"), (None, "_local/$management"),
                       (None, "$management")]:
        conn = connect(router, space)
        try:
            assert not management_answers(conn, target, to), (target, to)
        finally:
            conn.close()
