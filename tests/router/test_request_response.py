"""Request/response, as in Proton's client/server examples, through the embedded router: a
requester's dynamic receiver gets `$temp.<n>` as its reply-to, and a responder answers on a
sender attached to that address or on an anonymous sender (`to` per message). Any user of the
same space with a send right may reply; nobody else can, and every refusal says why with an
AMQP error while the connection stays usable."""
import re
import threading

import pytest
from proton import Delivery, Message
from proton.utils import LinkDetached

from .conftest import ADDRESS, add_tenant

SERVER = {"users": "server", "sources": "requests", "targets": "requests",
          "allowAnonymousSender": True}
CLIENT = {"users": "client", "sources": "", "targets": "requests", "allowDynamicSource": True,
          "allowAnonymousSender": True}
MUTE = {"users": "mute", "sources": "requests", "targets": "", "allowAnonymousSender": True}
PLAIN = {"users": "plain", "sources": "requests", "targets": "requests"}  # no anonymous sender


@pytest.fixture(scope="module", autouse=True)
def tenants(mgmt):
    add_tenant(mgmt, "rr", {"server": "server-pw", "client": "client-pw", "mute": "mute-pw",
                            "plain": "plain-pw"},
               {"servers": SERVER, "clients": CLIENT, "mutes": MUTE, "plains": PLAIN})
    add_tenant(mgmt, "rr-other", {"mallory": "mallory-pw"},
               {"all": {"users": "mallory", "sources": "*", "targets": "*",
                        "allowDynamicSource": True, "allowAnonymousSender": True}})
    mgmt.create(ADDRESS, "rr-requests", prefix="rr/requests")
    mgmt.create(ADDRESS, "rr-secret", prefix="rr/secret")
    mgmt.create(ADDRESS, "rr-other-requests", prefix="rr-other/requests")


def serve(router, anonymous: bool, count: int, ready: threading.Event, errors: list) -> None:
    """The responder: uppercases each request's body to its reply_to, with the request's id."""
    try:
        conn = router.connect("server", "server-pw", vhost="rr")
        requests = conn.create_receiver("requests", credit=count)
        ready.set()
        senders = {}
        shared = conn.create_sender(None, name="replies") if anonymous else None
        for _ in range(count):
            request = requests.receive(10)
            requests.accept()  # before replying: the requester waits for this outcome
            reply = Message(body=request.body.upper(), correlation_id=request.correlation_id)
            if anonymous:
                reply.address = request.reply_to
                shared.send(reply, timeout=10)
            else:
                sender = senders.get(request.reply_to)
                if sender is None:
                    sender = senders[request.reply_to] = conn.create_sender(
                        request.reply_to, name=f"reply-{len(senders)}")
                sender.send(reply, timeout=10)
        conn.close()
    except Exception as exc:  # noqa: BLE001 - reported to the test thread
        errors.append(exc)
        ready.set()


@pytest.mark.parametrize("anonymous", [False, True], ids=["named-reply", "anonymous-reply"])
def test_requests_get_their_replies_through_a_dynamic_reply_to(router, anonymous):
    ready, errors = threading.Event(), []
    server = threading.Thread(target=serve, args=(router, anonymous, 3, ready, errors))
    server.start()
    assert ready.wait(10)
    conn = router.connect("client", "client-pw", vhost="rr")
    replies = conn.create_receiver(None, dynamic=True, credit=10)
    reply_to = replies.remote_source.address
    sender = conn.create_sender("requests")

    got = []
    for i, word in enumerate(["ping", "pong", "pang"]):
        sender.send(Message(body=word, reply_to=reply_to, correlation_id=i))
        reply = replies.receive(10)
        replies.accept()
        got.append((reply.correlation_id, reply.body))
    conn.close()  # a blocking connection sends the last accept when it next does I/O
    server.join(20)

    assert errors == []
    assert reply_to.startswith("$temp.")
    assert got == [(0, "PING"), (1, "PONG"), (2, "PANG")]


def rejected(conn, sender, message) -> tuple:
    """Sends without raising; the outcome and its condition."""
    delivery = sender.link.send(message)
    conn.wait(lambda: delivery.remote_state in (Delivery.ACCEPTED, Delivery.REJECTED,
                                                Delivery.RELEASED), timeout=5)
    condition = delivery.remote.condition
    return delivery.remote_state, condition and (condition.name, condition.description)


@pytest.fixture
def reply_to(router):
    """A requester's dynamic address in space rr, alive for the test."""
    conn = router.connect("client", "client-pw", vhost="rr")
    receiver = conn.create_receiver(None, dynamic=True, credit=10)
    yield receiver.remote_source.address
    conn.close()


def test_a_user_without_send_rights_cannot_reply(router, reply_to):
    conn = router.connect("mute", "mute-pw", vhost="rr")
    with pytest.raises(LinkDetached, match="unauthorized-access.*no send rights"):
        conn.create_sender(reply_to)
    anonymous = conn.create_sender(None, name="anon")

    outcome = rejected(conn, anonymous, Message(address=reply_to, body="x"))

    assert outcome[0] == Delivery.REJECTED
    assert outcome[1][0] == "amqp:unauthorized-access"
    conn.close()


def test_another_spaces_user_cannot_reach_a_dynamic_address(router, reply_to):
    conn = router.connect("mallory", "mallory-pw", vhost="rr-other")
    with pytest.raises(LinkDetached, match=f"not-found.*No dynamic address {re.escape(reply_to)}"):
        conn.create_sender(reply_to)
    anonymous = conn.create_sender(None, name="anon")

    outcome = rejected(conn, anonymous, Message(address=reply_to, body="x"))

    assert outcome == (Delivery.REJECTED,
                       ("amqp:not-found", f"No dynamic address {reply_to} in vhost rr-other"))
    conn.close()


def test_each_message_of_an_anonymous_link_is_authorised_and_the_link_stays_up(router):
    consumer = router.connect("server", "server-pw", vhost="rr")
    requests = consumer.create_receiver("requests", credit=10)
    conn = router.connect("client", "client-pw", vhost="rr")
    anonymous = conn.create_sender(None, name="anon")

    refused = rejected(conn, anonymous, Message(address="secret", body="x"))
    unknown = rejected(conn, anonymous, Message(address="nowhere", body="x"))
    missing = rejected(conn, anonymous, Message(body="no to"))
    received = []

    def consume():
        received.append(requests.receive(10).body)
        requests.accept()
        consumer.close()  # sends the accept

    thread = threading.Thread(target=consume)
    thread.start()
    anonymous.send(Message(address="requests", body="fine"), timeout=10)
    thread.join(10)

    assert refused == (Delivery.REJECTED,
                       ("amqp:unauthorized-access", "User client@rr may not send to secret"))
    assert unknown[1][0] == "amqp:unauthorized-access"  # not in the rules: not even looked up
    assert missing[1][0] == "amqp:not-found" and "needs a `to`" in missing[1][1]
    assert received == ["fine"]
    conn.close()


def test_an_anonymous_sender_needs_the_policy_to_allow_it(router):
    conn = router.connect("plain", "plain-pw", vhost="rr")
    with pytest.raises(LinkDetached, match="unauthorized-access.*anonymous sender"):
        conn.create_sender(None, name="anon")
    assert conn.create_sender("requests").link.remote_target.address == "requests"
    conn.close()


def test_a_message_for_an_address_without_receivers_is_released(router):
    """An attached sender would get no credit; an anonymous one is told `released`, so it
    can try again, and nothing waits in the router for a receiver that may never come."""
    conn = router.connect("client", "client-pw", vhost="rr")
    anonymous = conn.create_sender(None, name="anon")

    outcome = rejected(conn, anonymous, Message(address="requests", body="nobody home"))

    assert outcome[0] == Delivery.RELEASED
    conn.close()
