"""A brokered space metered end to end: real AMQP 1.0 clients against the real RabbitMQ, the
sampler (workers.usage.broker_counters), the usage job (Spark). Messages in and out are exact
against docs/usage.md once RabbitMQ's statistics settled; a source that cannot be read gives
gaps. An outsider tenant's traffic never shows in the tenant's usage."""
import datetime
import time
import uuid

import pytest
from proton import Message, Timeout

from config_service import services
from spark.samples import write_samples
from tenants.models import AddressUsageDaily, Tenant
from tests.conftest import CTX, b64
from tests.workers.rabbit import connect
from workers.agents import runner
from workers.usage import sampler
from workers.usage.job import run_day

PASSWORD = "app-password"
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
