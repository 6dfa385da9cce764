"""The $management node: CRUD on qdrouterd entity types and its status codes."""

import time

import pytest
from proton import symbol

from .conftest import ADDRESS, AUTO_LINK, CONNECTOR, LINK_ROUTE, VHOST, RouterProcess

ROUTER = "org.apache.qpid.dispatch.router"
CONNECTION = "org.apache.qpid.dispatch.connection"


def test_create_returns_201_with_defaults(mgmt):
    status, _, body = mgmt.request("CREATE", {"prefix": "/t1/orders"}, type=ADDRESS,
                                   name="ragent-orders")
    assert status == 201
    assert body["prefix"] == "t1/orders"  # a leading slash is dropped, as qdrouterd does
    assert body["waypoint"] is False
    assert body["distribution"] == "balanced"
    assert body["name"] == "ragent-orders"


def test_duplicate_name_is_a_conflict(mgmt):
    mgmt.create(ADDRESS, "ragent-dup", prefix="t1/dup")
    status, description, _ = mgmt.request("CREATE", {"prefix": "t1/dup2"}, type=ADDRESS,
                                          name="ragent-dup")
    assert (status, description) == (400, "Name conflicts with an existing entity")


def test_query_returns_requested_attributes(mgmt):
    mgmt.create(ADDRESS, "ragent-q1", prefix="t1/q1", waypoint=True)
    status, _, body = mgmt.request("QUERY", {"attributeNames": ["name", "waypoint"]},
                                   entityType=ADDRESS)
    assert status == 200
    assert body["attributeNames"] == ["name", "waypoint"]
    assert ["ragent-q1", True] in body["results"]


def test_query_with_no_attribute_names_returns_all(mgmt):
    mgmt.create(LINK_ROUTE, "ragent-lr", prefix="t1/topic", direction="in", connection="c1")
    rows = mgmt.query(LINK_ROUTE)
    row = next(r for r in rows if r["name"] == "ragent-lr")
    assert row["direction"] == "in" and row["connection"] == "c1" and row["identity"]


def test_read_update_delete(mgmt):
    created = mgmt.create(AUTO_LINK, "ragent-al", address="t1/q1", direction="out",
                          connection="nowhere", externalAddress="/amq/queue/q1")
    status, _, body = mgmt.request("READ", None, type=AUTO_LINK, name="ragent-al")
    assert status == 200 and body["externalAddress"] == "/amq/queue/q1"
    status, _, body = mgmt.request("UPDATE", {"externalAddress": "/amq/queue/q2"},
                                   type=AUTO_LINK, identity=created["identity"])
    assert status == 200 and body["externalAddress"] == "/amq/queue/q2"
    assert mgmt.delete(AUTO_LINK, "ragent-al")[0] == 204
    assert mgmt.request("READ", None, type=AUTO_LINK, name="ragent-al")[0] == 404


def test_unknown_entity_is_404(mgmt):
    assert mgmt.delete(ADDRESS, "no-such-address")[0] == 404
    assert mgmt.request("QUERY", {}, entityType="org.example.nothing")[0] == 404


def test_users_are_the_auth_service_s_not_an_entity_type(mgmt):
    assert mgmt.request("QUERY", {}, entityType="io.maas.router.user")[0] == 404


@pytest.mark.parametrize("etype,attrs", [
    (ADDRESS, {}),  # neither prefix nor pattern
    (ADDRESS, {"prefix": "a", "distribution": "sideways"}),
    (LINK_ROUTE, {"prefix": "a", "direction": "up", "connection": "c"}),
    (AUTO_LINK, {"address": "a", "direction": "in"}),  # no connection nor containerId
    (ADDRESS, {"prefix": "a", "colour": "blue"}),
])
def test_bad_request_is_400_with_description(mgmt, etype, attrs):
    status, description, _ = mgmt.request("CREATE", attrs, type=etype, name="ragent-bad")
    assert status == 400
    assert description


def test_connector_password_is_never_returned(mgmt):
    body = mgmt.create(CONNECTOR, "ragent-broker", host="127.0.0.1", port="1",
                       saslUsername="guest", saslPassword="guest", virtualHost="vhost:x")
    assert "saslPassword" not in body
    assert body["virtualHost"] == "vhost:x"
    assert mgmt.delete(CONNECTOR, "ragent-broker")[0] == 204


def test_vhost_entities_round_trip(mgmt):
    mgmt.create(VHOST, "t9", hostname="t9", maxConnections=3,
                groups={"g": {"users": "bob", "sources": "*", "targets": "a*"}})
    row = next(r for r in mgmt.query(VHOST) if r["name"] == "t9")
    assert row["maxConnections"] == 3
    assert row["groups"]["g"]["targets"] == "a*"


def test_router_entity_counts_links(mgmt):
    rows = mgmt.query(ROUTER, ["linkCount", "connectionCount"])
    assert rows[0]["linkCount"] >= 2 and rows[0]["connectionCount"] >= 1


def test_router_entity_reports_an_uptime_that_a_restart_resets():
    router = RouterProcess()
    router.start()
    try:
        def uptime() -> int:
            client = router.management()
            try:
                return client.query(ROUTER, ["uptimeSeconds"])[0]["uptimeSeconds"]
            finally:
                client.close()

        deadline = time.monotonic() + 10
        while uptime() < 1:  # qdrouterd counts whole seconds
            assert time.monotonic() < deadline
            time.sleep(0.1)
        router.restart()
        assert uptime() == 0
    finally:
        router.stop()


def test_a_client_connection_is_closed_by_its_admin_status_and_its_properties_are_bounded(
        router, mgmt):
    from proton import ConnectionException

    from .conftest import add_tenant
    add_tenant(mgmt, "closing", {"carl": "carl-pw"},
               {"all": {"users": "carl", "sources": "*", "targets": "*"}})
    props = {symbol(f"k{i:02}"): "v" * (300 if i == 0 else 3) for i in range(20)}
    client = router.connect("carl", "carl-pw", vhost="closing", properties=props)
    (row,) = [r for r in mgmt.query(CONNECTION) if r["tenant"] == "closing"]
    # the MaaS extension `vhost`: one vhost's connections and links, not the router's
    status, _, body = mgmt.request("QUERY", {"attributeNames": ["identity", "tenant"]},
                                   entityType=CONNECTION, vhost="closing")
    assert status == 200 and body["results"] == [[row["identity"], "closing"]]
    status, _, body = mgmt.request("QUERY", {"attributeNames": ["connectionId"]},
                                   entityType="org.apache.qpid.dispatch.router.link",
                                   vhost="closing")
    assert status == 200 and body["results"] == []  # carl has no link yet
    assert len(row["properties"]) == 16 and max(map(len, row["properties"].values())) == 256
    status, _, _ = mgmt.request("UPDATE", {"color": "red"}, type=CONNECTION,
                                identity=row["identity"])
    assert status == 400  # only adminStatus (and enableProtocolTrace) can change
    own = [r for r in mgmt.query(CONNECTION) if r["user"] == "admin"]
    assert mgmt.request("UPDATE", {"adminStatus": "deleted"}, type=CONNECTION,
                        identity=own[0]["identity"])[0] == 403  # not a client's
    status, _, body = mgmt.request("UPDATE", {"adminStatus": "deleted"}, type=CONNECTION,
                                   identity=row["identity"])
    assert status == 200 and body["identity"] == row["identity"]
    assert body["operStatus"] == "closing"  # until its peer answers, or 5 s
    with pytest.raises(ConnectionException, match="forced"):
        client.wait(lambda: False, timeout=5)
    assert mgmt.request("UPDATE", {"adminStatus": "deleted"}, type=CONNECTION,
                        identity="999999")[0] == 404
