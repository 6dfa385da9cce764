"""Live enforcement of tenant quotas on the real router: a throttled tenant's new senders are
refused with amqp:resource-limit-exceeded, and released after an operator override."""
import datetime

import pytest
from django.utils import timezone
from proton import Message
from proton.utils import BlockingConnection, LinkDetached

from config_service import services
from eventlog.models import ConfigEvent
from tenants import services as tenant_services
from tenants.models import TenantQuota
from tests.conftest import CTX, b64
from tests.workers.conftest import sync

PASSWORD = "app-password"


@pytest.fixture
def space(tenant):
    TenantQuota.objects.filter(tenant=tenant).update(messages_per_day=1000)  # BREACH's limit
    s = services.create_address_space(ctx=CTX, tenant=tenant, name="quota", type="standard",
                                      plan="standard-small")
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
    return BlockingConnection(f"amqp://127.0.0.1:{router.amqp_port}",
                              user=f"app@{space.vhost}", password=PASSWORD,
                              allowed_mechs="PLAIN", allow_insecure_mechs=True, timeout=5)


BREACH = [{"limit": "messages_per_day", "used": 1200, "limit_value": 1000}]


def test_a_throttled_tenant_cannot_open_new_senders_until_an_override(router, space, tenant):
    conn = connect(router, space)
    existing = conn.create_sender("orders", name="before")
    assert tenant_services.throttle(ctx=CTX, tenant=tenant, limits=BREACH)
    assert ConfigEvent.objects.filter(type="tenant.throttled").count() == 1
    sync(space)  # what the fan-out after commit does; no restart of anything
    with pytest.raises(LinkDetached, match="resource-limit-exceeded"):
        conn.create_sender("orders", name="after")
    conn.create_receiver("orders", credit=1, name="reader")  # receiving is still allowed
    existing.send(Message(body="in flight"))  # senders already open keep working
    until = timezone.now() + datetime.timedelta(hours=1)
    assert tenant_services.unthrottle(ctx=CTX, tenant=tenant, reason="operator override",
                                      override_until=until)
    sync(space)
    conn.create_sender("orders", name="released").send(Message(body="again"))
    # While the override lasts, a new breach is recorded but not enforced.
    assert not tenant_services.throttle(ctx=CTX, tenant=tenant, limits=BREACH)
    conn.close()


def test_a_throttle_is_lifted_when_usage_is_back_under_quota(router, space, tenant):
    tenant_services.throttle(ctx=CTX, tenant=tenant, limits=BREACH)
    sync(space)
    assert tenant_services.unthrottle(ctx=CTX, tenant=tenant, reason="usage back under quota")
    sync(space)
    conn = connect(router, space)
    conn.create_sender("orders").send(Message(body="ok"))
    conn.close()
    assert ConfigEvent.objects.filter(type="tenant.unthrottled").count() == 1
