"""Live quota evaluation with a real Celery worker and the real router: an operator's quota
change through the API throttles a tenant over it within seconds, raising it releases the tenant
(new senders accepted again), and an explicit evaluation catches usage that grew since; the
figures come from samples in a temporary usage store and the job's stored hourly rollups."""
import datetime
import time
import uuid

import pytest
from django.conf import settings
from django.utils import timezone
from proton.utils import BlockingConnection, LinkDetached

from config_service import services
from eventlog.models import ConfigEvent
from spark.samples import GAUGES, write_samples
from tenants.models import AddressUsageHourly, SpacePeakHourly, TenantQuota, UsageJobRun
from tenants.services import throttle, unthrottle
from tests.conftest import CTX, Worker, b64, client_for, make_user, wait_for
from tests.workers.conftest import sync
from workers.usage import live_quota

PASSWORD = "app-password"
UTC = datetime.UTC


@pytest.fixture
def worker(transactional_db, redis_server, router, store):
    """A real Celery worker running every agent, pointed at the module's router and the store."""
    w = Worker(settings.DATABASES["default"]["NAME"], MAAS_USAGE_STORE=store,
               MAAS_ROUTER_MANAGEMENT_URL=settings.MAAS_ROUTER_MANAGEMENT_URL,
               MAAS_ROUTER_ADMIN_PASSWORD=settings.MAAS_ROUTER_ADMIN_PASSWORD,
               MAAS_ROUTER_AMQP_PORT=str(router.amqp_port))
    w.start()
    yield w
    w.stop()


@pytest.fixture
def space(transactional_db, tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"l{uuid.uuid4().hex[:5]}",
                                      type="standard", plan="standard-small")
    services.create_address(ctx=CTX, space=s, address="orders", type="anycast",
                            plan="standard-small-anycast")
    services.create_messaging_user(
        ctx=CTX, space=s, username="app",
        authentication={"type": "password", "password": b64(PASSWORD)},
        authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
    sync(s)
    yield s
    services.delete_address_space(ctx=CTX, space=s)
    sync(s)


def sample(tenant, space, ts, messages_in: int, messages_out: int, since=None) -> dict:
    return {"sample_id": uuid.uuid4().hex, "ts": ts, "tenant": tenant.slug, "space": space.name,
            "address": "orders", "source": "router:test", "kind": "address", "epoch": "e1",
            "since": since, "messages_in": messages_in, "messages_out": messages_out,
            "bytes_in": 0, "bytes_out": 0, **dict.fromkeys(GAUGES, 0)}


def sender_accepted(router, space) -> bool:
    """Whether the router lets the messaging user open a new sender now."""
    conn = BlockingConnection(f"amqp://127.0.0.1:{router.amqp_port}", user=f"app@{space.vhost}",
                              password=PASSWORD, allowed_mechs="PLAIN",
                              allow_insecure_mechs=True, timeout=5, virtual_host=space.vhost)
    try:
        conn.create_sender("orders")
        return True
    except LinkDetached:
        return False
    finally:
        conn.close()


def throttled(tenant) -> bool:
    return TenantQuota.objects.get(tenant=tenant).throttled


def away_from_midnight() -> datetime.datetime:
    """Now, at least a minute before the UTC day ends (the test's samples are of one day)."""
    now = timezone.now()
    left = (datetime.datetime.combine(now.date() + datetime.timedelta(days=1), datetime.time(),
                                      tzinfo=UTC) - now).total_seconds()
    if left < 60:
        time.sleep(left + 1)
    return timezone.now()


def test_an_operator_throttles_and_releases_a_tenant_within_seconds_through_the_api(
        worker, router, space, tenant, store):
    now = away_from_midnight()
    day_start = datetime.datetime.combine(now.date(), datetime.time(), tzinfo=UTC)
    # A counter begun today, read once: 700 in + 500 out = 1200 messages so far.
    write_samples([sample(tenant, space, now, 700, 500, since=day_start)], store, now)
    operator = client_for(make_user("ops", staff=True))
    url = f"/api/v1/tenants/{tenant.slug}/quota/"
    assert sender_accepted(router, space)

    started = time.monotonic()
    answer = operator.patch(url, {"spec": {"messages_per_day": 1000}}, format="json")
    assert answer.status_code == 200
    wait_for(lambda: throttled(tenant), 30, interval=0.05, what="the live throttle")
    throttle_seconds = time.monotonic() - started
    event = ConfigEvent.objects.get(tenant=tenant, type="tenant.throttled")
    assert event.actor == "system:quota-live"
    assert event.payload["limits"] == [
        {"limit": "messages_per_day", "used": 1200, "limit_value": 1000}]
    wait_for(lambda: not sender_accepted(router, space), 30, interval=0.1,
             what="the router to refuse new senders")
    refused_seconds = time.monotonic() - started

    started = time.monotonic()
    assert operator.patch(url, {"spec": {"messages_per_day": 5000}},
                          format="json").status_code == 200
    wait_for(lambda: not throttled(tenant), 30, interval=0.05, what="the live release")
    release_seconds = time.monotonic() - started
    wait_for(lambda: sender_accepted(router, space), 30, interval=0.1,
             what="the router to accept new senders")
    accepted_seconds = time.monotonic() - started
    released = ConfigEvent.objects.get(tenant=tenant, type="tenant.unthrottled")
    assert released.actor == "system:quota-live"
    changes = ConfigEvent.objects.filter(tenant=tenant, type="tenant.quota_changed")
    assert [e.payload["quota"]["messages_per_day"] for e in changes.order_by("position")] == [
        1000, 5000]

    # Usage grows past the new limit: an operator's explicit evaluation catches it at once.
    later = timezone.now()
    write_samples([sample(tenant, space, later, 3000, 2500)], store, later)
    started = time.monotonic()
    assert operator.post(url + "evaluate/").status_code == 202
    wait_for(lambda: throttled(tenant), 30, interval=0.05, what="the evaluation")
    evaluate_seconds = time.monotonic() - started
    assert TenantQuota.objects.get(tenant=tenant).throttled_limits == [
        {"limit": "messages_per_day", "used": 5500, "limit_value": 5000}]
    print(f"\nquota lowered -> throttled {throttle_seconds:.2f} s, new senders refused "
          f"{refused_seconds:.2f} s; quota raised -> released {release_seconds:.2f} s, new "
          f"senders accepted {accepted_seconds:.2f} s; evaluate -> throttled "
          f"{evaluate_seconds:.2f} s")
    assert release_seconds < 10 and accepted_seconds < 15


def at(hour: int, minute: int = 0) -> datetime.datetime:
    return datetime.datetime(2026, 11, 20, hour, minute, tzinfo=UTC)


def test_the_evaluation_adds_todays_samples_since_the_last_job_run_to_its_rollups(
        transactional_db, space, tenant, store, settings):
    settings.MAAS_USAGE_SAMPLE_INTERVAL = 60.0
    run = UsageJobRun.objects.create(day=at(0).date(), status=UsageJobRun.SUCCEEDED)
    UsageJobRun.objects.filter(pk=run.pk).update(started_at=at(12, 5))  # the cut: 12:00
    for hour, count in ((10, 400), (11, 300), (12, 10**6)):  # 12:00 is after the cut: ignored
        AddressUsageHourly.objects.create(tenant=tenant, space=space.name, address="orders",
                                          hour=at(hour), messages_in=count, messages_out=count)
    SpacePeakHourly.objects.create(tenant=tenant, space=space.name, hour=at(11), connections=7)
    write_samples([sample(tenant, space, at(11, 58), 5000, 5000)], store, at(11, 58))
    write_samples([sample(tenant, space, at(12, 20), 5150, 5050)], store, at(12, 20))
    TenantQuota.objects.filter(tenant=tenant).update(messages_per_day=1499, peak_connections=7)

    result = live_quota.evaluate(tenant.pk, now=at(12, 30))
    assert result["cut"] == at(12).isoformat()
    assert result["measures"] == {"messages": 1400 + 200, "bytes": 0, "stored_bytes": 0,
                                  "connections": 7}
    assert result["action"] == "throttled" and throttled(tenant)
    assert result["breached"] == [{"limit": "messages_per_day", "used": 1600,
                                   "limit_value": 1499}]
    TenantQuota.objects.filter(tenant=tenant).update(messages_per_day=1600)
    assert live_quota.evaluate(tenant.pk, now=at(12, 30))["action"] == "released"
    assert not throttled(tenant)


def test_a_stale_breach_of_a_limit_raised_since_does_not_throttle(transactional_db, tenant):
    TenantQuota.objects.filter(tenant=tenant).update(messages_per_day=5000)
    # What a job run that read the old limit of 1000 as it started would report.
    assert not throttle(ctx=CTX, tenant=tenant, limits=[
        {"limit": "messages_per_day", "used": 1200, "limit_value": 1000}])
    assert not throttled(tenant)


def test_figures_older_than_a_throttle_do_not_lift_it(transactional_db, tenant):
    TenantQuota.objects.filter(tenant=tenant).update(messages_per_day=1000)
    before = timezone.now()
    assert throttle(ctx=CTX, tenant=tenant, limits=[
        {"limit": "messages_per_day", "used": 1200, "limit_value": 1000}])
    assert not unthrottle(ctx=CTX, tenant=tenant, reason="job", measured_before=before)
    assert throttled(tenant)
    assert unthrottle(ctx=CTX, tenant=tenant, reason="job", measured_before=timezone.now())
    assert not throttled(tenant)
