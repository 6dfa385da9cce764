"""A topic's fanout exchange `$maas.all.<topic>` on the real RabbitMQ, made by the storage
controller from a standard space built through the service functions: the router's broker
login receives every message of the topic from it, whatever the routing key; it goes with
the topic; a tenant's user has no broker login to read it with."""
import uuid
from urllib.parse import quote

import pytest
from proton import ConnectionException, Message

from config_service import services
from config_service.models import AddressSpace
from tests.conftest import CTX, b64, wait_for
from tests.workers import rabbit
from workers import credentials
from workers.agents import runner
from workers.agents.storage import rabbitmq

PASSWORD = "app-password"


@pytest.fixture
def space(tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"fan{uuid.uuid4().hex[:5]}",
                                      type="standard", plan="standard-medium")
    yield s
    if AddressSpace.objects.filter(uid=s.uid, terminating=False).exists():
        services.delete_address_space(ctx=CTX, space=s)
    runner.run(s.uid, "storage")


def topic(space, name="news"):
    services.create_address(ctx=CTX, space=space, address=name, type="topic",
                            plan="standard-small-topic")


def router_login(space) -> tuple[str, str]:
    """The broker user and password the space's router logs in with."""
    user, password = credentials.router_broker(space.vhost)
    return rabbitmq.broker_username(space.vhost, user), password


def bindings_from(space, exchange: str) -> list[dict]:
    path = f"/exchanges/{quote(space.vhost, safe='')}/{quote(exchange, safe='')}/bindings/source"
    response = rabbit.api(path)
    return response.json() if response.status_code == 200 else []


def exchanges(space) -> dict[str, dict]:
    return {x["name"]: x for x in rabbit.api(f"/exchanges/{quote(space.vhost, safe='')}").json()}


def test_the_fanout_exchange_is_bound_from_the_topic_with_every_key(space):
    topic(space)
    runner.run(space.uid, "storage")
    fanout = exchanges(space)["$maas.all.news"]
    assert (fanout["type"], fanout["durable"], fanout["internal"]) == ("fanout", False, False)  # transient: rabbitmq_objects
    assert fanout["arguments"] == {rabbitmq.OWNER_ARG: True}
    assert [(b["destination"], b["destination_type"], b["routing_key"], b["arguments"])
            for b in bindings_from(space, "news")] == [
        ("$maas.all.news", "exchange", "#", {rabbitmq.OWNER_ARG: True})]


def test_a_receiver_of_the_fanout_exchange_gets_every_message_of_the_topic(space):
    topic(space)
    runner.run(space.uid, "storage")
    conn = rabbit.connect(space.vhost, *router_login(space))
    try:
        receiver = conn.create_receiver("/exchange/$maas.all.news", credit=10)
        # The attach returns before the broker has bound the receiver's temporary queue.
        wait_for(lambda: any(b["destination"].startswith("amq.gen")
                             for b in bindings_from(space, "$maas.all.news")),
                 10, what="the receiver's queue bound to $maas.all.news")
        conn.create_sender("/exchange/news/a.b").send(Message(body="keyed"))
        conn.create_sender("/exchange/news").send(Message(body="by subject", subject="x.y"))
        bodies = set()
        for _ in range(2):
            bodies.add(receiver.receive(timeout=5).body)
            receiver.accept()
    finally:
        conn.close()
    assert bodies == {"keyed", "by subject"}


def test_deleting_the_topic_deletes_its_fanout_exchange_and_binding(space):
    topic(space)
    topic(space, "other")
    runner.run(space.uid, "storage")
    assert {"$maas.all.news", "$maas.all.other"} <= set(exchanges(space))
    services.delete_address(ctx=CTX, space=space, name=f"{space.name}.news")
    runner.run(space.uid, "storage")
    left = exchanges(space)
    assert "news" not in left and "$maas.all.news" not in left
    assert not [b for b in rabbit.api(f"/bindings/{quote(space.vhost, safe='')}").json()
                if "news" in (b["source"], b["destination"])]
    assert [b["destination"] for b in bindings_from(space, "other")] == ["$maas.all.other"]


def test_a_tenant_user_with_every_right_cannot_reach_the_broker_at_all(space):
    # A standard space's clients speak to its router only: the broker has no login for them,
    # so none can read the fanout exchange (or any queue) around the router's policy.
    topic(space)
    services.create_messaging_user(
        ctx=CTX, space=space, username="app",
        authentication={"type": "password", "password": b64(PASSWORD)},
        authorization=[{"addresses": ["*"], "operations": ["send", "recv", "manage"]}])
    runner.run(space.uid, "storage")
    login = rabbitmq.broker_username(space.vhost, "app")
    assert rabbit.api(f"/users/{quote(login, safe='')}").status_code == 404
    with pytest.raises(ConnectionException, match="unauthorized-access"):
        rabbit.connect(space.vhost, login, PASSWORD).create_receiver("/exchange/$maas.all.news")
    assert bindings_from(space, "$maas.all.news") == []
