"""Rotating the router's broker credential (manage.py rotate_secrets): the agents carry the new
one to RabbitMQ and the real embedded router, the old one stops working, and queues behind the
router keep every message."""
import uuid

import pytest
from django.core.management import call_command
from proton import ConnectionException, Message

from config_service import services
from tests.conftest import CTX
from tests.workers import rabbit
from tests.workers.conftest import sync
from tests.workers.test_standard_space_e2e import connect, receive_bodies, user
from workers import credentials

pytestmark = pytest.mark.slow


@pytest.fixture
def space(tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"rot{uuid.uuid4().hex[:5]}",
                                      type="standard", plan="standard-medium")
    services.create_address(ctx=CTX, space=s, address="orders", type="queue",
                            plan="standard-small-queue")
    user(s)
    sync(s)
    yield s
    services.delete_address_space(ctx=CTX, space=s)
    sync(s)


def test_a_rotated_router_credential_reaches_broker_and_router_and_messages_still_flow(
        router, space):
    conn = connect(router, space)
    conn.create_sender("orders").send(Message(body="before"))
    conn.close()
    old_user, old_password = credentials.router_broker(space.vhost)

    call_command("rotate_secrets", space=space.vhost)
    sync(space)  # what the wake-up sent by the command does in a worker

    new_user, new_password = credentials.router_broker(space.vhost)
    assert new_user != old_user and new_password != old_password
    with pytest.raises(ConnectionException):
        rabbit.connect(space.vhost, f"{old_user}@{space.vhost}", old_password).close()
    conn = connect(router, space)
    conn.create_sender("orders").send(Message(body="after"))
    receiver = conn.create_receiver("orders", credit=10)
    assert receive_bodies(receiver, 2, timeout=10) == ["before", "after"]
    conn.close()
