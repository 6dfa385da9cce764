"""Usage exact to the message on both routers, end to end: real clients send known counts, the
sampler reads the real router, the usage job (Spark, one session for the module) rolls the day
up. Anycast and multicast traffic sent and detached within one sampling interval is metered
exactly; a router paused (SIGSTOP) for longer than a sampling interval gives gaps, never zeros,
and bills nothing extra."""
import datetime
import os
import signal
import threading
import uuid

import pytest
from proton import Message
from proton.utils import BlockingConnection

from config_service import services
from spark.samples import write_samples
from tenants.models import AddressUsageDaily
from tests.conftest import CTX, b64
from tests.workers.conftest import sync
from workers.usage import sampler
from workers.usage.job import run_day

pytestmark = pytest.mark.slow

BOTH_ROUTERS = True  # tests/workers/conftest.py: the embedded router and qdrouterd
PASSWORD = "app-password"


@pytest.fixture
def space(tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"x{uuid.uuid4().hex[:5]}",
                                      type="standard", plan="standard-small")
    for name, kind in (("calls", "anycast"), ("news", "multicast")):
        services.create_address(ctx=CTX, space=s, address=name, type=kind,
                                plan=f"standard-small-{kind}")
    services.create_messaging_user(
        ctx=CTX, space=s, username="app",
        authentication={"type": "password", "password": b64(PASSWORD)},
        authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
    sync(s)
    yield s
    services.delete_address_space(ctx=CTX, space=s)
    sync(s)


def connect(router, space):
    return BlockingConnection(f"amqp://127.0.0.1:{router.amqp_port}", user=f"app@{space.vhost}",
                              password=PASSWORD, allowed_mechs="PLAIN",
                              allow_insecure_mechs=True, timeout=10, virtual_host=space.vhost)


class Clock:
    """Sample times one second apart, all on one UTC day (the job's)."""

    def __init__(self, store: str):
        self.store = store
        now = datetime.datetime.now(datetime.UTC)
        self.now = max(now, now.replace(hour=0, minute=0, second=0, microsecond=0)
                       + datetime.timedelta(minutes=1))
        if self.now.hour == 23 and self.now.minute >= 50:
            self.now += datetime.timedelta(minutes=20)  # never straddle midnight
        self.day = self.now.date()

    def sample(self) -> list[dict]:
        """One round of the sampler, stored as `sampler.sample` stores it."""
        self.now += datetime.timedelta(seconds=1)
        rows = sampler.collect(self.now)
        write_samples(rows, self.store, self.now)
        return rows


def metered(tenant, space, day) -> dict:
    return {r.address: (r.messages_in, r.messages_out)
            for r in AddressUsageDaily.objects.filter(tenant=tenant, space=space.name, day=day)}


def receive_in_thread(router, space, address: str, count: int, receivers: int = 1):
    """Receivers of their own connection, accepting `count` messages each, in a thread (an
    unsettled send waits for the receiver's outcome); returns (thread, received counts)."""
    conn = connect(router, space)
    links = [conn.create_receiver(address, credit=500, name=f"{address}-{i}")
             for i in range(receivers)]
    received = [0] * receivers

    def run():
        try:
            for _ in range(count):
                for i, link in enumerate(links):  # in turn: a multicast send waits for all
                    link.receive(15)
                    received[i] += 1
                    try:
                        link.accept()
                    except IndexError:  # a pre-settled copy (the embedded router's multicast)
                        pass
        finally:
            conn.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, received


def send(router, space, address: str, count: int) -> None:
    conn = connect(router, space)
    sender = conn.create_sender(address)
    for i in range(count):
        sender.send(Message(body=f"{address} {i}"))  # waits for the outcome
    conn.close()


def test_anycast_and_multicast_detached_within_one_interval_are_metered_exactly(
        router, space, store, spark, tenant):
    clock = Clock(store)
    clock.sample()  # the interval starts: nothing sent yet
    calls, got_calls = receive_in_thread(router, space, "calls", 300)
    news, got_news = receive_in_thread(router, space, "news", 100, receivers=2)
    send(router, space, "calls", 300)
    send(router, space, "news", 100)
    calls.join(30)
    news.join(30)
    assert got_calls == [300] and got_news == [100, 100]
    clock.sample()  # every link of both addresses detached before this reading
    assert run_day(clock.day, spark).status == "succeeded"
    assert metered(tenant, space, clock.day) == {"calls": (300, 300), "news": (100, 200)}


def test_a_paused_router_gives_gaps_and_bills_nothing_extra(router, space, store, spark, tenant,
                                                            monkeypatch):
    # The sampler waits this long for a router's answer (30 s): a pause outlasts 2 s as well.
    monkeypatch.setattr(sampler, "ROUTER_ANSWER_SECONDS", 2.0)
    clock = Clock(store)
    receiver, got = receive_in_thread(router, space, "calls", 50)
    send(router, space, "calls", 50)
    receiver.join(30)
    assert got == [50]
    clock.sample()
    os.kill(router.proc.pid, signal.SIGSTOP)
    try:
        during = clock.sample()  # longer than an interval: the management times out
    finally:
        os.kill(router.proc.pid, signal.SIGCONT)
    mine = [r for r in during if r["space"] == space.name and r["source"].startswith("router:")]
    assert mine and all(r["messages_in"] is None and r["bytes_out"] is None for r in mine)
    clock.sample()
    clock.sample()
    assert run_day(clock.day, spark).status == "succeeded"
    assert metered(tenant, space, clock.day)["calls"] == (50, 50)
