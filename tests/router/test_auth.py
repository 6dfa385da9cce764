"""SASL PLAIN against pushed user hashes, vhost selection, and qdrouterd-style vhost policy."""

import pytest
from proton import ConnectionException
from proton.utils import BlockingConnection, LinkDetached

from .conftest import ADDRESS, ADMIN_PASSWORD, add_tenant

OPEN = {"users": "alice", "sources": "*", "targets": "*", "allowDynamicSource": True}
READ_ONLY = {"users": "rita", "sources": "*", "targets": "", "maxReceivers": 1}


@pytest.fixture(scope="module", autouse=True)
def tenants(mgmt):
    add_tenant(mgmt, "red", {"alice": "alice-pw", "rita": "rita-pw"},
               {"writers": OPEN, "readers": READ_ONLY}, maxConnections=4)
    add_tenant(mgmt, "blue", {"bob": "bob-pw"},
               {"all": {"users": "bob", "sources": "*", "targets": "*"}}, maxConnections=1)
    mgmt.create(ADDRESS, "red-a", prefix="red/a")
    mgmt.create(ADDRESS, "blue-a", prefix="blue/a")


def test_right_password_connects_and_attaches(router):
    conn = router.connect("alice", "alice-pw", vhost="red")
    sender = conn.create_sender("a")
    assert sender.link.remote_target.address == "a"
    conn.close()


def test_wrong_password_is_refused(router):
    with pytest.raises(ConnectionException, match="(?i)auth"):
        router.connect("alice", "wrong", vhost="red")


def test_the_management_admin_cannot_log_in_on_the_client_listener(router):
    # Internal users belong to the management listener only (docs/security.md).
    for vhost in (None, "red"):
        with pytest.raises(ConnectionException, match="(?i)auth"):
            router.connect("admin", ADMIN_PASSWORD, vhost=vhost)


def test_anonymous_is_refused_on_client_listener(router):
    with pytest.raises(ConnectionException):
        BlockingConnection(f"amqp://127.0.0.1:{router.amqp_port}", allowed_mechs="ANONYMOUS",
                           timeout=5)


def test_vhost_from_username_suffix(router):
    conn = router.connect("alice@red", "alice-pw")
    conn.create_sender("a")
    conn.close()


def test_user_of_another_vhost_is_refused(router):
    with pytest.raises(ConnectionException, match="unauthorized-access"):
        router.connect("alice", "alice-pw", vhost="blue")


def test_user_without_send_permission_cannot_attach_sender(router):
    conn = router.connect("rita", "rita-pw", vhost="red")
    with pytest.raises(LinkDetached, match="unauthorized-access"):
        conn.create_sender("a")
    conn.close()


def test_unconfigured_address_is_not_found(router):
    conn = router.connect("alice", "alice-pw", vhost="red")
    with pytest.raises(LinkDetached, match="not-found"):
        conn.create_sender("nowhere")
    conn.close()


def test_address_of_another_vhost_is_not_reachable(router):
    # `blue/a` exists, but alice's `a` means `red/a` and `blue/a` means `red/blue/a`
    conn = router.connect("alice", "alice-pw", vhost="red")
    with pytest.raises(LinkDetached, match="not-found"):
        conn.create_sender("blue/a")
    conn.close()


def test_receiver_limit_is_resource_limit_exceeded(router):
    conn = router.connect("rita", "rita-pw", vhost="red")
    conn.create_receiver("a", name="first")
    with pytest.raises(LinkDetached, match="resource-limit-exceeded"):
        conn.create_receiver("a", name="second")
    conn.close()


def test_connection_limit_is_resource_limit_exceeded(router):
    first = router.connect("bob", "bob-pw", vhost="blue")
    with pytest.raises(ConnectionException, match="resource-limit-exceeded"):
        router.connect("bob", "bob-pw", vhost="blue")
    first.close()
