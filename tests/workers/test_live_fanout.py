"""End to end with a real Celery worker: API call -> event -> fan-out -> RabbitMQ -> Active,
and recovery when the worker is killed mid fan-out and Redis restarts empty."""
import pytest
from django.test import override_settings

from config_service import services
from config_service.models import Address, AppliedEvent
from eventlog.models import ConfigEvent, Outbox
from tests.conftest import CTX, address_manifest, client_for, space_manifest, wait_for
from tests.workers import rabbit
from workers.tasks import relay_outbox

pytestmark = pytest.mark.slow


def phase(client, url):
    return client.get(url).json()["status"]["phase"]


def test_an_address_created_over_the_api_becomes_active_and_exists_in_rabbitmq(
        live_worker, tenant, owner):
    api = client_for(owner)
    base = f"/api/v1/tenants/{tenant.slug}/addressspaces/"
    assert api.post(base, space_manifest("live"), format="json").status_code == 201
    created = api.post(base + "live/addresses/", address_manifest("live", "orders"),
                       format="json")
    assert created.status_code == 201
    url = base + "live/addresses/live.orders/"
    wait_for(lambda: phase(api, url) == "Active", 30, what="address Active")
    assert phase(api, base + "live/") == "Active"
    assert "orders" in rabbit.queue_names(f"{tenant.slug}.live")
    assert Outbox.objects.filter(acked_at__isnull=True).count() == 0
    # Deleting the space tears down its vhost and finally removes it.
    assert api.delete(base + "live/").status_code == 202
    wait_for(lambda: api.get(base + "live/").status_code == 404, 30, what="space removed")
    assert not rabbit.vhost_exists(f"{tenant.slug}.live")


@override_settings(MAAS_RELAY_AFTER_SECONDS=0)
def test_no_accepted_change_is_lost_or_applied_twice_when_the_worker_dies_and_redis_restarts(
        live_worker, redis_server, tenant):
    space = services.create_address_space(ctx=CTX, tenant=tenant, name="crash", type="brokered",
                                          plan="brokered-single-broker")
    names = [f"q{i:02d}" for i in range(30)]
    for i, name in enumerate(names):
        services.create_address(ctx=CTX, space=space, address=name, type="queue",
                                plan="brokered-queue")
        if i == 10:
            # Mid fan-out: some changes applied, others queued in Redis or being applied.
            wait_for(lambda: AppliedEvent.objects.filter(event__stream_id=space.uid).exists(),
                     30, interval=0.02, what="a first change applied")
            live_worker.kill()
    redis_server.stop()  # queued fan-out tasks are gone with it (no persistence)
    services.create_address(ctx=CTX, space=space, address="while-redis-down", type="queue",
                            plan="brokered-queue")  # accepted although it cannot be fanned out
    redis_server.start()
    live_worker.start()
    assert Outbox.objects.filter(acked_at__isnull=True).exists()

    def recovered():
        relay_outbox()  # what Celery beat runs every few seconds
        return not Outbox.objects.filter(stream_uid=space.uid, acked_at__isnull=True).exists()

    wait_for(recovered, 60, interval=1, what="the outbox to drain")
    expected = set(names) | {"while-redis-down"}
    assert expected <= rabbit.queue_names(space.vhost)
    events = ConfigEvent.objects.filter(stream_id=space.uid)
    applied = AppliedEvent.objects.filter(event__stream_id=space.uid, kind="storage")
    assert applied.count() == events.count()  # each event applied once: none lost, none twice
    assert Address.objects.filter(space=space).count() == len(expected)
    services.delete_address_space(ctx=CTX, space=space)
    wait_for(lambda: not rabbit.vhost_exists(space.vhost), 30, what="teardown")


def test_the_worker_keeps_its_database_sessions_from_one_task_to_the_next(live_worker, tenant):
    """Celery's Django fixup closed the connection around every task, so each change started a
    PostgreSQL backend; the worker now keeps its sessions as the web does (maas/celery.py)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        began = cursor.fetchone()[0]

    def worker_sessions() -> set:
        # begun since the test began: this process's own pool threads (an earlier test's
        # in-process reconciles) keep older ones
        with connection.cursor() as cursor:
            cursor.execute("SELECT pid, backend_start FROM pg_stat_activity"
                           " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                           " AND backend_start >= %s", [began])
            return set(cursor.fetchall())

    space = services.create_address_space(ctx=CTX, tenant=tenant, name="reuse", type="brokered",
                                          plan="brokered-single-broker")
    seen = set()
    for i in range(6):
        services.create_address(ctx=CTX, space=space, address=f"q{i}", type="queue",
                                plan="brokered-queue")
        wait_for(lambda i=i: AppliedEvent.objects.filter(
            event__stream_id=space.uid, event__type="address.created").count() == i + 1,
            30, what=f"change {i} applied")
        seen |= worker_sessions()
    # Seven tasks over two worker processes: at most a session each, open all along.
    assert 1 <= len(seen) <= 2, seen
    assert seen == worker_sessions()
    services.delete_address_space(ctx=CTX, space=space)
    wait_for(lambda: not rabbit.vhost_exists(space.vhost), 30, what="teardown")
