"""Request/response through the platform: on the embedded router the agent's vhost policy lets
a requester use a dynamic reply-to and any user of the space with send rules reply to it, with a
named or an anonymous sender; another space's user cannot reach the reply-to. On a qdrouterd 1.19
shared by spaces both reply forms are refused, and the tests say so; on a qdrouterd serving one
space named replies work (test_request_response_own_router.py; docs/router.md,
"Request/response")."""
import threading
import uuid

import pytest
from proton import Message
from proton.utils import LinkDetached

from config_service import services
from tests.conftest import CTX
from tests.workers.conftest import sync

from .test_standard_space_e2e import add, connect, phases, user

BOTH_ROUTERS = True
SERVER_RULES = [{"addresses": ["requests"], "operations": ["send", "recv"]}]
CLIENT_RULES = [{"addresses": ["requests"], "operations": ["send"]}]


@pytest.fixture
def rpc_space(tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"rpc{uuid.uuid4().hex[:5]}",
                                      type="standard", plan="standard-medium")
    add(s, "requests", "anycast", "standard-small-anycast")
    user(s, "server", SERVER_RULES)
    user(s, "client", CLIENT_RULES)
    sync(s)
    assert phases(s) == {"requests": "Active"}
    yield s
    services.delete_address_space(ctx=CTX, space=s)
    sync(s)


def respond(router, space, anonymous: bool, ready, errors) -> None:
    try:
        conn = connect(router, space, "server")
        requests = conn.create_receiver("requests", credit=1)
        ready.set()
        request = requests.receive(15)
        requests.accept()
        reply = Message(body=request.body.upper(), correlation_id=request.correlation_id)
        if anonymous:
            reply.address = request.reply_to
            conn.create_sender(None, name="replies").send(reply, timeout=10)
        else:
            conn.create_sender(request.reply_to, name="reply").send(reply, timeout=10)
        conn.close()
    except Exception as exc:  # noqa: BLE001 - reported to the test
        errors.append(exc)
        ready.set()


def request(router, space, anonymous: bool) -> tuple:
    ready, errors = threading.Event(), []
    server = threading.Thread(target=respond, args=(router, space, anonymous, ready, errors))
    server.start()
    assert ready.wait(15)
    conn = connect(router, space, "client")
    replies = conn.create_receiver(None, dynamic=True, credit=1)
    conn.create_sender("requests").send(
        Message(body="ping", reply_to=replies.remote_source.address, correlation_id="c-1"))
    reply = replies.receive(15)
    replies.accept()
    conn.close()
    server.join(20)
    return errors, (reply.correlation_id, reply.body)


def test_a_named_sender_replies_to_the_dynamic_reply_to(router, rpc_space):
    if router.kind == "qdrouterd":
        # Not on a qdrouterd 1.19 shared by spaces: its dynamic addresses are router-wide
        # (`amqp:/_topo/0/<router>/temp.<id>`), outside every space's targets, and granting
        # that prefix would let one space reply into another's (docs/router.md).
        conn = connect(router, rpc_space, "client")
        reply_to = conn.create_receiver(None, dynamic=True, credit=1).remote_source.address
        server = connect(router, rpc_space, "server")
        with pytest.raises(LinkDetached, match="link disallowed by local policy"):
            server.create_sender(reply_to, name="reply")
        assert reply_to.startswith("amqp:/_topo/")
        server.close()
        conn.close()
        return
    errors, reply = request(router, rpc_space, anonymous=False)

    assert errors == []
    assert reply == ("c-1", "PING")


def test_an_anonymous_sender_replies_on_the_embedded_router_only(router, rpc_space):
    if router.kind == "embedded":
        errors, reply = request(router, rpc_space, anonymous=True)
        assert errors == [] and reply == ("c-1", "PING")
    else:  # qdrouterd 1.19 would route a `to` after dropping a scheme:/ head: kept off
        conn = connect(router, rpc_space, "server")
        with pytest.raises(LinkDetached, match="unauthorized-access"):
            conn.create_sender(None, name="replies")
        conn.close()


def test_another_spaces_user_cannot_send_to_a_reply_to(router, rpc_space, tenant):
    other = services.create_address_space(ctx=CTX, tenant=tenant,
                                          name=f"oth{uuid.uuid4().hex[:5]}", type="standard",
                                          plan="standard-medium")
    add(other, "requests", "anycast", "standard-small-anycast")
    user(other, "mallory", [{"addresses": ["*"], "operations": ["send", "recv"]}])
    sync(other)
    conn = connect(router, rpc_space, "client")
    reply_to = conn.create_receiver(None, dynamic=True, credit=1).remote_source.address
    intruder = connect(router, other, "mallory")
    try:
        with pytest.raises(LinkDetached):
            sender = intruder.create_sender(reply_to)
            sender.send(Message(body="spoof"), timeout=3)
    finally:
        intruder.close()
        conn.close()
        services.delete_address_space(ctx=CTX, space=other)
        sync(other)
