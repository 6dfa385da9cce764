"""Request/response on a qdrouterd 1.19 that serves one space, as each standard space's router
does on Kubernetes (Listeners.tenant_vhost): the router agent sees that the router is the
space's alone and lets users with send rules reply to its dynamic addresses
(`amqp:/_topo/0/<router>/temp.<id>`), which a router shared by spaces must refuse. Every
other `_topo` address stays guarded, anonymous senders stay off (docs/router.md,
"Request/response"), and another space's user cannot even connect."""
import uuid

import pytest
from proton import ConnectionException, Message
from proton.utils import LinkDetached

from config_service import services
from tests.conftest import CTX
from tests.qdrouterd import AuthService, QdrouterdProcess, needs_qdrouterd
from tests.router.conftest import ADMIN_PASSWORD
from tests.workers.conftest import sync

from .test_request_response_e2e import CLIENT_RULES, SERVER_RULES, request
from .test_standard_space_e2e import add, connect, phases, user

pytestmark = [needs_qdrouterd, pytest.mark.django_db(transaction=True)]
ROUTER_ID = "maas-test"  # QdrouterdProcess's router id


@pytest.fixture
def router_settings():
    """Not the module router of conftest: each test starts the router of its own space."""


def point_agent_at(settings, proc) -> None:
    settings.MAAS_ROUTER_MANAGEMENT_URL = f"amqp://127.0.0.1:{proc.mgmt_port}"
    settings.MAAS_ROUTER_ADMIN_USER = "admin"
    settings.MAAS_ROUTER_ADMIN_PASSWORD = ADMIN_PASSWORD
    settings.MAAS_ROUTER_AMQP_PORT = proc.amqp_port


@pytest.fixture
def auth():
    service = AuthService()
    yield service
    service.stop()


@pytest.fixture
def own(settings, tenant, auth):
    """(router, space): a standard space and a qdrouterd serving it alone, configured by the
    router agent; users `server` (send/recv requests), `client` (send requests) and `mute`
    (recv requests only)."""
    space = services.create_address_space(ctx=CTX, tenant=tenant,
                                          name=f"own{uuid.uuid4().hex[:5]}", type="standard",
                                          plan="standard-medium")
    proc = QdrouterdProcess(auth.port, tenant_vhost=space.vhost)
    proc.relay = None
    proc.start()
    point_agent_at(settings, proc)
    add(space, "requests", "anycast", "standard-small-anycast")
    user(space, "server", SERVER_RULES)
    user(space, "client", CLIENT_RULES)
    user(space, "mute", [{"addresses": ["requests"], "operations": ["recv"]}])
    sync(space)
    assert phases(space) == {"requests": "Active"}
    yield proc, space
    services.delete_address_space(ctx=CTX, space=space)
    sync(space)
    proc.stop()


def test_a_named_sender_replies_to_the_dynamic_reply_to(own):
    proc, space = own
    conn = connect(proc, space, "client")
    reply_to = conn.create_receiver(None, dynamic=True, credit=1).remote_source.address
    conn.close()
    assert reply_to.startswith(f"amqp:/_topo/0/{ROUTER_ID}/temp.")

    errors, reply = request(proc, space, anonymous=False)

    assert errors == []
    assert reply == ("c-1", "PING")


def test_who_may_not_reply_is_refused_with_an_amqp_error(own):
    proc, space = own
    requester = connect(proc, space, "client")
    reply_to = requester.create_receiver(None, dynamic=True, credit=1).remote_source.address
    mute = connect(proc, space, "mute")  # no send rule: no reply either
    server = connect(proc, space, "server")
    try:
        with pytest.raises(LinkDetached, match="link disallowed by local policy"):
            mute.create_sender(reply_to, name="reply")
        # qdrouterd routes an anonymous message's `to` after dropping a `scheme:/` head, which
        # its policy check does not: anonymous senders stay off there.
        with pytest.raises(LinkDetached, match="unauthorized-access"):
            server.create_sender(None, name="replies")
    finally:
        for conn in (mute, server, requester):
            conn.close()


@pytest.mark.parametrize("target", [
    f"amqp:/_topo/0/{ROUTER_ID}/$management",       # the router's management
    f"_topo/0/{ROUTER_ID}/$management",
    f"_topo/0/{ROUTER_ID}/qdrouter.ma",               # the routing protocol
    f"_topo/0/{ROUTER_ID}/qdhello",
    "_topo/all/qdrouter",
    f"amqp:/_topo/0/{ROUTER_ID}/temp.x:/_local/$management",  # routed as `_local/...`
    f"_topo/0/{ROUTER_ID}/temp.x/_local/$management",
    "_local/$management",
])
def test_the_routers_own_addresses_stay_out_of_reach(own, target):
    """The policy grants `_topo/0/*` for replies; the guard link routes refuse every `_topo`
    address but a dynamic one (dataplane/qdrouterd.py, TOPO_GUARD_PATTERNS)."""
    proc, space = own
    server = connect(proc, space, "server")
    try:
        with pytest.raises(LinkDetached):
            sender = server.create_sender(target, name="probe")
            sender.send(Message(body="probe", properties={"operation": "QUERY"}), timeout=3)
    finally:
        server.close()


def test_another_spaces_user_cannot_connect(own, tenant):
    proc, space = own
    other = services.create_address_space(ctx=CTX, tenant=tenant,
                                          name=f"oth{uuid.uuid4().hex[:5]}", type="standard",
                                          plan="standard-medium")
    user(other, "mallory", [{"addresses": ["*"], "operations": ["send", "recv"]}])
    try:
        with pytest.raises(ConnectionException):
            connect(proc, other, "mallory")
    finally:
        services.delete_address_space(ctx=CTX, space=other)
