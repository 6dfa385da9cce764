"""A brokered space metered end to end: real AMQP 1.0 clients against the real RabbitMQ, the
sampler (workers.usage.broker_counters), the usage job (Spark). Messages in and out are exact
against docs/usage.md once RabbitMQ's statistics settled; a source that cannot be read gives
gaps. An outsider tenant's traffic never shows in the tenant's usage. An idle vhost's queues are
listed again as soon as something its counters cannot tell changes: a queue the storage
controller made with no message moving (its mark, workers.agents.storage.changed_vhosts) or a
consumer attached on a connection already open (the broker's consumers, in the vhost's
signature), long before the hourly relisting (broker_counters.RELIST_EVERY)."""
import datetime
import time
import uuid
from collections import Counter
from urllib.parse import unquote

import pytest
from proton import Message, Timeout

from config_service import services
from spark.samples import write_samples
from tenants.models import AddressUsageDaily, Tenant
from tests.conftest import CTX, b64, wait_for
from tests.workers.rabbit import api as broker_get
from tests.workers.rabbit import connect
from workers import endpoints
from workers.agents import runner
from workers.agents.storage import changed_vhosts
from workers.clients import rabbitmq_api
from workers.usage import broker_counters, sampler
from workers.usage.job import run_day

PASSWORD = "app-password"
STATS_TIMEOUT = 120.0  # RabbitMQ copies its statistics every 30 s here, then 30 s to settle
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def no_router(settings):
    settings.MAAS_ROUTER_ENABLED = False  # brokered spaces only: no router to read


def brokered(tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"b{uuid.uuid4().hex[:5]}",
                                      type="brokered", plan="brokered-single-broker")
    services.create_address(ctx=CTX, space=s, address="orders", type="queue",
                            plan="brokered-queue")
    services.create_messaging_user(
        ctx=CTX, space=s, username="app",
        authentication={"type": "password", "password": b64(PASSWORD)},
        authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
    runner.run(s.uid, "storage")
    return s


@pytest.fixture
def spaces(tenant):
    other = Tenant.objects.exclude(pk=tenant.pk).get(slug__startswith="other-")  # the outsider's
    made = [brokered(tenant), brokered(other)]
    yield made
    for s in made:
        services.delete_address_space(ctx=CTX, space=s)
        runner.run(s.uid, "storage")


def traffic(space, sent: int, taken: int):
    """Sends and takes; the connection is returned open: RabbitMQ 3.10 at times loses the
    figures of a channel that ends within its first statistics interval (docs/storage.md,
    "Exact"), and this test is about what the sampler and the job make of the figures."""
    conn = connect(space.vhost, f"app@{space.vhost}", PASSWORD)
    sender = conn.create_sender("/amq/queue/orders")
    for i in range(sent):
        sender.send(Message(body=f"order {i:04d}"))
    receiver = conn.create_receiver("/amq/queue/orders", credit=1)
    for _ in range(taken):
        receiver.receive(10)
        receiver.accept()
    try:  # the blocking connection sends the last accept only while it works
        conn.wait(lambda: False, timeout=1)
    except Timeout:
        pass
    return conn


def reading(rows, space) -> dict:
    return next(r for r in rows if r["space"] == space.name and r["address"] == "orders")


def test_brokered_messages_are_metered_exactly_and_per_tenant(spaces, store, spark, tenant):
    mine, outsider = spaces
    now = datetime.datetime.now(datetime.UTC)
    now = max(now, now.replace(hour=0, minute=1, second=0, microsecond=0))
    if now.hour == 23 and now.minute >= 58:
        now += datetime.timedelta(minutes=5)  # never straddle midnight
    first = sampler.collect(now)
    write_samples(first, store, now)
    assert reading(first, mine)["epoch"]  # a named counter instance
    clients = [traffic(mine, 37, 12), traffic(outsider, 5, 5)]
    deadline = time.monotonic() + 60  # RabbitMQ's statistics lag, usually by 2-5 s
    while True:
        now += datetime.timedelta(seconds=1)
        rows = sampler.collect(now)
        got = reading(rows, mine)
        # Each figure settles on its own (RabbitMQ copies its statistics tables apart).
        settled = (got["messages_in"], got["messages_out"], got["stored_messages"]) == (37, 12, 25)
        if settled or time.monotonic() > deadline:
            break
        time.sleep(1)
    for client in clients:
        client.close()
    write_samples(rows, store, now)
    assert (got["messages_in"], got["messages_out"]) == (37, 12)
    assert got["stored_messages"] == 25
    space_row = next(r for r in rows if r["space"] == mine.name and r["kind"] == "space")
    assert space_row["source"] == f"broker:{mine.vhost}" and space_row["epoch"]
    assert run_day(now.date(), spark).status == "succeeded"
    usage = {r.address: (r.messages_in, r.messages_out)
             for r in AddressUsageDaily.objects.filter(tenant=tenant, space=mine.name,
                                                       day=now.date())}
    # The queue was created after the window began (its creation stamp): all of it counts.
    assert usage["orders"] == (37, 12)
    assert not AddressUsageDaily.objects.filter(tenant=tenant, space=outsider.name).exists()


def test_an_unreachable_broker_gives_gaps_not_zeros(spaces, store, settings):
    mine, _ = spaces
    reachable = settings.RABBITMQ_API_URL
    settings.RABBITMQ_API_URL = "http://127.0.0.1:9/api"  # nothing listens there
    try:
        rows = [r for r in sampler.collect() if r["space"] == mine.name]
    finally:
        settings.RABBITMQ_API_URL = reachable  # for the teardown
    assert rows and all(r["messages_in"] is None and r["stored_bytes"] is None for r in rows)


@pytest.fixture
def listings(monkeypatch) -> Counter:
    """{vhost: listings of its queues} over every client the sampler makes (the real client:
    each call still goes to RabbitMQ), with a sampler of its own whose clock never relists."""
    monkeypatch.setattr(broker_counters, "idle", broker_counters.IdleVhosts())
    monkeypatch.setattr(broker_counters, "RELIST_EVERY", 1e9)
    monkeypatch.setattr(broker_counters, "MARK_SKEW", 0.0)  # one host, one clock
    seen: Counter = Counter()
    request = rabbitmq_api.RabbitMQApi.request

    def counting(self, method, path, *args, **kwargs):
        if method == "GET" and path.startswith("/queues/"):
            seen[unquote(path.removeprefix("/queues/"))] += 1
        return request(self, method, path, *args, **kwargs)

    monkeypatch.setattr(rabbitmq_api.RabbitMQApi, "request", counting)
    return seen


def rows(space) -> dict:
    """This round's samples of `space`: {address ("" for the space row): sample}."""
    return {r["address"]: r for r in sampler.collect() if r["space"] == space.name}


def test_a_new_queue_and_a_new_consumer_are_read_before_the_hourly_relisting(
        spaces, listings, monkeypatch):
    mine, outsider = spaces
    conn = connect(mine.vhost, f"app@{mine.vhost}", PASSWORD)  # open before the first listing
    try:
        # A message sent and taken on the connection: the vhost's counters then all exist (a
        # counter that first shows would move the signature by itself). A new vhost's row
        # gains its message counts with the broker's first statistics copy: the rounds
        # compared start after both.
        conn.create_sender("/amq/queue/orders").send(Message(body="first"))
        taker = conn.create_receiver("/amq/queue/orders", credit=1)
        taker.receive(10)
        taker.accept()
        try:  # the blocking connection sends the accept only while it works
            conn.wait(lambda: False, timeout=1)
        except Timeout:
            pass
        wait_for(lambda: (broker_get(f"/vhosts/{mine.vhost}").json().get("message_stats")
                          or {}).get("ack") == 1, 90, interval=1, what="the ack in the stats")
        wait_for(lambda: all("messages" in broker_get(f"/vhosts/{s.vhost}").json()
                             for s in spaces), 60, what="the vhosts' first statistics")
        monkeypatch.setattr(broker_counters, "SETTLE_SECONDS", 0.0)  # nothing moving yet
        rows(mine)
        first = dict(listings)
        assert first[mine.vhost] >= 1 and first[outsider.vhost] >= 1
        assert "invoices" not in rows(mine)
        assert listings == first  # idle: its listing given again

        started = time.time()
        services.create_address(ctx=CTX, space=mine, address="invoices", type="queue",
                                plan="brokered-queue")
        runner.run(mine.uid, "storage")  # the short path: three calls, no message moves
        broker = endpoints.of(mine).broker.api_url.rstrip("/")  # the API client's base URL
        marked = changed_vhosts.marks(broker, [mine.vhost, outsider.vhost])
        assert marked[mine.vhost] >= started > marked[outsider.vhost]  # made with its space
        now = rows(mine)
        assert now["invoices"]["messages_in"] == 0 and now["orders"]["messages_in"] == 1
        assert listings[mine.vhost] == first[mine.vhost] + 1
        assert listings[outsider.vhost] == first[outsider.vhost]

        # A consumer on the open connection moves no counter: the broker's consumers tell.
        # Statistics copied apart must agree before a listing is kept (SETTLE_SECONDS).
        monkeypatch.setattr(broker_counters, "SETTLE_SECONDS", 30.0)
        conn.create_receiver("/amq/queue/invoices", credit=1)
        before = listings[mine.vhost]
        wait_for(lambda: rows(mine)[""]["receivers"] == 2, STATS_TIMEOUT, interval=1,
                 what="the consumer in the space's samples")
        assert listings[mine.vhost] > before
        assert listings[outsider.vhost] == first[outsider.vhost]
    finally:
        conn.close()

