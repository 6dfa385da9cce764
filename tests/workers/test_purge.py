"""Purge is a service function: POST .../addresses/{name}/purge/ (and the portal's button)
append `address.purged`, and the storage agent carries out each one exactly once on the real
RabbitMQ: a duplicate delivery or a resync never purges messages sent after it."""
import pytest
from proton import Message

from config_service import services
from eventlog.models import ConfigEvent
from tests.conftest import CTX, b64
from tests.workers import rabbit
from workers.agents import runner

PASSWORD = "purge-password"


@pytest.fixture
def space(tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name="purging", type="brokered",
                                      plan="brokered-single-broker")
    services.create_address(ctx=CTX, space=s, address="orders", type="queue",
                            plan="brokered-queue")
    services.create_messaging_user(
        ctx=CTX, space=s, username="app",
        authentication={"type": "password", "password": b64(PASSWORD)},
        authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
    runner.run(s.uid, "storage")
    yield s
    services.delete_address_space(ctx=CTX, space=s)
    runner.run(s.uid, "storage")


def _send(space, *bodies):
    conn = rabbit.connect(space.vhost, f"app@{space.vhost}", PASSWORD)
    sender = conn.create_sender("/amq/queue/orders")
    for body in bodies:
        sender.send(Message(body=body))
    conn.close()


def _drain(space, timeout=2.0) -> list[str]:
    conn = rabbit.connect(space.vhost, f"app@{space.vhost}", PASSWORD)
    receiver = conn.create_receiver("/amq/queue/orders", credit=100)
    bodies = []
    try:
        while True:
            bodies.append(receiver.receive(timeout=timeout).body)
            receiver.accept()
    except Exception:  # proton's Timeout: nothing more stored
        pass
    conn.close()
    return bodies


def _purge_url(tenant, space):
    return (f"/api/v1/tenants/{tenant.slug}/addressspaces/{space.name}/addresses/"
            "purging.orders/purge/")


def test_a_purge_through_the_api_drops_the_stored_messages_once(tenant, space, api):
    _send(space, "a", "b", "c")
    response = api.post(_purge_url(tenant, space))
    assert response.status_code == 202, response.content
    event = ConfigEvent.objects.get(stream_id=space.uid, type="address.purged")
    assert event.payload == {"name": "purging.orders"} and event.actor == "token:default:olivia"

    runner.run(space.uid, "storage")
    _send(space, "d", "e")
    runner.run(space.uid, "storage")  # a duplicate delivery, or the resync
    assert _drain(space) == ["d", "e"]


def test_an_address_that_stores_nothing_cannot_be_purged(tenant, space, api):
    services.create_address(ctx=CTX, space=space, address="news", type="topic",
                            plan="brokered-topic")
    response = api.post(_purge_url(tenant, space).replace("purging.orders", "purging.news"))
    assert response.status_code == 400 and response.json()["field"] == "spec.type"
    response = api.post(_purge_url(tenant, space).replace("purging.orders", "purging.nope"))
    assert response.status_code == 404
    assert not ConfigEvent.objects.filter(stream_id=space.uid, type="address.purged").exists()


def test_outsiders_and_viewers_cannot_purge(tenant, space, clients):
    assert clients["outsider"].post(_purge_url(tenant, space)).status_code == 404
    assert clients["viewer"].post(_purge_url(tenant, space)).status_code == 403
    assert not ConfigEvent.objects.filter(stream_id=space.uid, type="address.purged").exists()


def test_the_portal_purges_through_the_same_service_function(tenant, space, owner, client):
    client.force_login(owner)
    url = (f"/portal/t/{tenant.slug}/spaces/{space.name}/addresses/purging.orders/purge/")
    assert client.post(url).status_code == 302
    event = ConfigEvent.objects.get(stream_id=space.uid, type="address.purged")
    assert event.actor == "user:olivia"
