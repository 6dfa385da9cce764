"""Usage end to end: the sampler reads the real router and RabbitMQ, the nightly Spark job
(local[2], one session for the module) rolls the samples up, a breach throttles the tenant on
the real router, and getting back under quota lifts it. Re-running a day gives the same rows."""
import datetime
import uuid

import pytest
from proton import Message
from proton.utils import BlockingConnection, LinkDetached

from config_service import services
from eventlog.models import ConfigEvent
from spark.samples import write_samples
from tenants.models import AddressUsageDaily, QuotaEvaluation, TenantQuota, TenantUsageDaily
from tests.conftest import CTX, b64
from tests.workers.conftest import sync
from workers.usage import sampler
from workers.usage.job import run_day

pytestmark = pytest.mark.slow

BOTH_ROUTERS = True  # tests/workers/conftest.py: the embedded router and qdrouterd
PASSWORD = "app-password"
DAY = datetime.date(2026, 11, 20)


@pytest.fixture
def space(tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"u{uuid.uuid4().hex[:5]}",
                                      type="standard", plan="standard-small")
    services.create_address(ctx=CTX, space=s, address="orders", type="queue",
                            plan="standard-small-queue")
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
                              allow_insecure_mechs=True, timeout=5, virtual_host=space.vhost)


def at(hour, minute=0, day=DAY):
    return datetime.datetime.combine(day, datetime.time(hour, minute), tzinfo=datetime.UTC)


def test_the_sampler_reads_router_and_broker_counters(router, space, store):
    conn = connect(router, space)
    sender = conn.create_sender("orders")
    for i in range(5):
        sender.send(Message(body=f"{i:0100d}"))
    conn.close()
    rows = sampler.collect(at(12))
    mine = [r for r in rows if r["space"] == space.name]
    routed = [r for r in mine if r["address"] == "orders" and r["source"].startswith("router:")]
    assert routed[0]["messages_in"] == 5
    if router.kind == "embedded":  # qdrouterd 1.19 counts deliveries, not bytes
        assert routed[0]["bytes_in"] > 500
    assert any(r["kind"] == "space" for r in mine)
    assert sampler.sample(at(12)) == len(rows)  # appended to the usage store


def test_a_breach_throttles_the_tenant_on_the_router_and_usage_back_under_lifts_it(
        router, space, store, spark, tenant):
    TenantQuota.objects.filter(tenant=tenant).update(messages_per_day=1000)

    def reading(hour, count, day=DAY, sample_id=None, epoch="run-1"):
        return {"sample_id": sample_id or uuid.uuid4().hex, "ts": at(hour, day=day),
                "tenant": tenant.slug, "space": space.name, "address": "orders",
                "source": "router:test", "kind": "address", "epoch": epoch, "since": None,
                "messages_in": count,
                "messages_out": 0, "bytes_in": count * 100, "bytes_out": 0,
                "stored_messages": 0, "stored_bytes": 0, "connections": 0, "senders": 0,
                "receivers": 0}

    # 0 -> 900 -> a new run of the router (epoch) from zero -> 300: 1200 published on DAY.
    write_samples([reading(1, 0), reading(8, 900), reading(9, 100, epoch="run-2")], store, at(9))
    write_samples([reading(10, 300, epoch="run-2")], store, at(10))
    run = run_day(DAY, spark)
    assert run.status == "succeeded"
    assert TenantUsageDaily.objects.get(tenant=tenant, day=DAY).messages == 1200
    breach = QuotaEvaluation.objects.get(tenant=tenant, day=DAY, limit="messages_per_day")
    assert breach.breached and breach.used == 1200 and breach.limit_value == 1000
    assert TenantQuota.objects.get(tenant=tenant).throttled
    sync(space)  # the fan-out after tenant.throttled
    conn = connect(router, space)
    # the embedded router: resource-limit-exceeded; qdrouterd (maxSenders 0 is no limit
    # there): the policy's empty targets, unauthorized-access
    refusal = "resource-limit-exceeded" if router.kind == "embedded" else "unauthorized-access"
    with pytest.raises(LinkDetached, match=refusal):
        conn.create_sender("orders")
    conn.close()

    def day_rows():
        fields = ("tenant_id", "space", "address", "messages_in", "bytes_in", "stored_bytes")
        return sorted(AddressUsageDaily.objects.filter(day=DAY).values_list(*fields))

    before = day_rows()
    run_day(DAY, spark)  # re-running the day replaces it: the same rows, not doubled
    assert day_rows() == before and len(before) == 1

    next_day = DAY + datetime.timedelta(days=1)
    write_samples([reading(2, 310, day=next_day, epoch="run-2")], store, at(2, day=next_day))
    run_day(next_day, spark)
    assert not TenantQuota.objects.get(tenant=tenant).throttled
    assert ConfigEvent.objects.filter(tenant=tenant, type="tenant.unthrottled").exists()
    sync(space)
    conn = connect(router, space)
    conn.create_sender("orders").send(Message(body="allowed again"))
    conn.close()
