"""A brokered space's connections through the API, from its RabbitMQ vhost, with real AMQP 1.0
clients: who is connected and what each consumes, and a close the client sees
(RabbitMQ 3.10 ends an AMQP 1.0 client's session); an outsider gets 404, a viewer sees but cannot close, and the broker's
connections of another space are neither listed nor closable."""
import uuid

import pytest
from proton import ConnectionException

from config_service import services
from eventlog.models import ConfigEvent
from tests.conftest import CTX, b64, wait_for
from tests.workers import rabbit
from tests.workers.rabbit import SessionEnded
from workers.agents import runner

pytestmark = pytest.mark.django_db(transaction=True)
PASSWORD = "conn-password"


@pytest.fixture
def spaces(tenant):
    made = []
    for name in ("bx", "by"):
        s = services.create_address_space(ctx=CTX, tenant=tenant,
                                          name=f"{name}{uuid.uuid4().hex[:5]}",
                                          type="brokered", plan="brokered-single-broker")
        services.create_address(ctx=CTX, space=s, address="orders", type="queue",
                                plan="brokered-queue")
        services.create_messaging_user(
            ctx=CTX, space=s, username="app",
            authentication={"type": "password", "password": b64(PASSWORD)},
            authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
        runner.run(s.uid, "storage")
        made.append(s)
    yield made
    for s in made:
        services.delete_address_space(ctx=CTX, space=s)
        runner.run(s.uid, "storage")


def test_a_brokered_space_lists_its_broker_connections_and_closes_one(tenant, spaces, clients):
    mine, other = spaces
    consumer = rabbit.connect(mine.vhost, f"app@{mine.vhost}", PASSWORD)
    consumer.create_receiver("/amq/queue/orders", credit=5)
    elsewhere = rabbit.connect(other.vhost, f"app@{other.vhost}", PASSWORD)
    # RabbitMQ 3.10 opens an AMQP 1.0 client's vhost connection with its first session
    elsewhere.create_receiver("/amq/queue/orders", credit=1)
    url = f"/api/v1/tenants/{tenant.slug}/addressspaces/{mine.name}/connections/"
    try:
        def listed():
            items = clients["viewer"].get(url).json()["items"]
            return items if items and items[0]["metrics"]["receivers"] == 1 else None
        (conn,) = wait_for(listed, timeout=15, what="the broker to list the connection")
        assert conn["spec"]["via"] == "broker" and conn["spec"]["protocol"] == "amqp"
        assert conn["spec"]["principal"] == "app" and conn["spec"]["encrypted"] is False
        assert conn["metadata"]["name"].startswith("broker-")
        detail = clients["viewer"].get(f"{url}{conn['metadata']['name']}/").json()
        assert [(link["role"], link["address"]) for link in detail["links"]] == [
            ("receiver", "orders")]

        other_url = url.replace(mine.name, other.name)
        theirs = wait_for(lambda: clients["owner"].get(other_url).json()["items"], timeout=15,
                          what="the other space's connection")
        assert clients["owner"].delete(
            f"{url}{theirs[0]['metadata']['name']}/").status_code == 404
        assert clients["outsider"].get(url).status_code == 404
        assert clients["viewer"].delete(f"{url}{conn['metadata']['name']}/").status_code == 403
        assert clients["admin"].delete(f"{url}broker-bm9wZQ/").status_code == 404

        assert clients["admin"].delete(f"{url}{conn['metadata']['name']}/").status_code == 204
        # RabbitMQ 3.10 closes the AMQP 1.0 client's vhost connection: its session ends
        with pytest.raises((SessionEnded, ConnectionException), match="internal-error|forced"):
            consumer.wait(lambda: False, timeout=10)
        wait_for(lambda: clients["viewer"].get(url).json()["metadata"]["totalItems"] == 0,
                 timeout=15, what="the closed connection to leave the list")
        assert clients["owner"].get(other_url).json()["metadata"]["totalItems"] == 1
        event = ConfigEvent.objects.get(type="tenant.connection_closed")
        assert event.payload["via"] == "broker" and event.payload["space"] == mine.name
    finally:
        elsewhere.close()
        try:
            consumer.close()
        except Exception:
            pass
