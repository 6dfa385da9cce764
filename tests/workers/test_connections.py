"""A space's connections through the API, from the real router (embedded and qdrouterd) with
real proton clients: who is connected with which links, filters, and a close that the client
sees (amqp:connection:forced) and recovers from by reconnecting; an outsider gets 404, a viewer
sees but cannot close, another space's connections are neither listed nor closable, and every
close is in the tenant's audit trail. Each answer is checked against the OpenAPI schema."""
import pytest
from proton import ConnectionException, Message

from config_service import services
from eventlog.models import ConfigEvent
from tests.config_service.test_openapi_schema import conform, document, strict  # noqa: F401
from tests.conftest import CTX, wait_for
from tests.router.conftest import pump_until
from tests.workers.conftest import sync
from tests.workers.connected import connect, exchange, standard_space

BOTH_ROUTERS = True  # tests/workers/conftest.py: the embedded router and qdrouterd


@pytest.fixture
def spaces(tenant):
    made = [standard_space(tenant), standard_space(tenant)]
    yield made
    for s in made:
        services.delete_address_space(ctx=CTX, space=s)
        sync(s)


def _url(tenant, space, connection=""):
    base = f"/api/v1/tenants/{tenant.slug}/addressspaces/{space.name}/connections/"
    return f"{base}{connection}/" if connection else base


def test_who_is_connected_and_closing_one(router, tenant, spaces, clients, conform):  # noqa: F811
    mine, other = spaces
    receiving = connect(router, mine, "receiving-app")
    sending = connect(router, mine, "sending-app")
    sender, receiver = exchange(sending, receiving, 3)
    elsewhere = connect(router, other, "other-space-app")
    try:
        body = conform(clients["viewer"].get(_url(tenant, mine)), 200)
        assert body["kind"] == "ConnectionList" and body["metadata"]["totalItems"] == 2
        by_container = {c["spec"]["containerId"]: c for c in body["items"]}
        assert set(by_container) == {"receiving-app", "sending-app"}
        s = by_container["sending-app"]
        assert s["spec"]["principal"] == "app" and s["spec"]["protocol"] == "amqp"
        assert s["spec"]["via"] == "router" and s["spec"]["encrypted"] is False
        assert s["spec"]["hostname"].startswith("127.0.0.1:")
        assert s["metrics"]["senders"] == 1 and s["metrics"]["messagesIn"] == 3
        r = by_container["receiving-app"]
        assert r["metrics"]["receivers"] == 1 and r["metrics"]["messagesOut"] == 3
        assert r["metadata"]["creationTimestamp"]

        detail = conform(clients["viewer"].get(_url(tenant, mine, r["metadata"]["name"])), 200)
        (link,) = detail["links"]
        assert link["role"] == "receiver" and link["address"] == "orders"
        assert link["metrics"]["deliveries"] == 3 and link["metrics"]["credit"] >= 0

        search = clients["viewer"].get(_url(tenant, mine), {"search": "sending"}).json()
        assert [c["spec"]["containerId"] for c in search["items"]] == ["sending-app"]
        assert clients["viewer"].get(_url(tenant, mine), {"protocol": "mqtt"}).json()[
            "metadata"]["totalItems"] == 0
        assert conform(clients["viewer"].get(_url(tenant, mine), {"via": "pigeon"}),
                       400)["field"] == "via"

        # the other space's connection is not this space's, to list or to close
        theirs = clients["owner"].get(_url(tenant, other)).json()["items"]
        assert [c["spec"]["containerId"] for c in theirs] == ["other-space-app"]
        assert clients["owner"].delete(
            _url(tenant, mine, theirs[0]["metadata"]["name"])).status_code == 404
        assert clients["outsider"].get(_url(tenant, mine)).status_code == 404
        assert clients["outsider"].delete(
            _url(tenant, mine, s["metadata"]["name"])).status_code == 404
        conform(clients["viewer"].delete(_url(tenant, mine, s["metadata"]["name"])), 403)
        assert clients["admin"].delete(_url(tenant, mine, "router-999999")).status_code == 404
        assert not ConfigEvent.objects.filter(type="tenant.connection_closed").exists()

        conform(clients["admin"].delete(_url(tenant, mine, s["metadata"]["name"])), 204)
        # gone from the list at once, before the client has even read the close
        assert {c["spec"]["containerId"] for c in clients["viewer"].get(
            _url(tenant, mine)).json()["items"]} == {"receiving-app"}

        # the client sees the close: amqp:connection:forced from the embedded router; qdrouterd
        # 1.19 drops the socket, which proton reports as an aborted connection
        with pytest.raises(ConnectionException, match="forced|aborted"):
            sending.wait(lambda: False, timeout=10)
        wait_for(lambda: {c["spec"]["containerId"] for c in clients["viewer"].get(
            _url(tenant, mine)).json()["items"]} == {"receiving-app"}, timeout=10,
            what="the closed connection to leave the list")
        # the other space's client is untouched
        assert elsewhere.create_receiver("orders", credit=1) is not None

        event = ConfigEvent.objects.get(type="tenant.connection_closed")
        assert event.tenant_id == tenant.id and event.stream_id == tenant.uid
        assert event.payload["space"] == mine.name and event.payload["id"] == s["metadata"]["name"]
        assert event.payload["container_id"] == "sending-app" and event.payload["principal"] == "app"
        audit = clients["admin"].get(f"/api/v1/tenants/{tenant.slug}/audit/").json()
        assert any(e["type"] == "tenant.connection_closed" for e in audit["items"])

        # the closed client reconnects and works again
        again = connect(router, mine, "sending-app")
        resent = again.create_sender("orders")
        pump_until(lambda: resent.link.credit > 0, again, receiving)
        resent.link.send(Message(body="back"))
        pump_until(lambda: len(receiver.fetcher.incoming) == 1, again, receiving)
        assert receiver.receive(timeout=5).body == "back"
        receiver.accept()
        again.close()
    finally:
        for conn in (receiving, elsewhere):
            conn.close()
        try:
            sending.close()
        except Exception:
            pass


def test_a_router_that_does_not_answer_gives_503_and_closes_nothing(tenant, spaces, clients,
                                                                     settings, conform):  # noqa: F811
    from tests.conftest import free_tcp_port
    working = settings.MAAS_ROUTER_MANAGEMENT_URL
    settings.MAAS_ROUTER_MANAGEMENT_URL = f"amqp://127.0.0.1:{free_tcp_port()}"
    try:
        body = conform(clients["viewer"].get(_url(tenant, spaces[0])), 503)
        assert body["code"] == "unavailable" and "router" in body["message"]
        conform(clients["admin"].delete(_url(tenant, spaces[0], "router-1")), 503)
        assert not ConfigEvent.objects.filter(type="tenant.connection_closed").exists()
    finally:
        settings.MAAS_ROUTER_MANAGEMENT_URL = working  # for the spaces' teardown


def test_what_a_client_calls_itself_is_shown_with_its_control_characters_escaped(
        router, tenant, spaces, clients):
    """A container id or property with terminal escapes must not reach an operator's terminal
    (maasctl) or page as they are."""
    evil = connect(router, spaces[0], "app\x1b[2J\x07")
    try:
        (item,) = clients["viewer"].get(_url(tenant, spaces[0])).json()["items"]
        assert item["spec"]["containerId"] == "app\\x1b[2J\\x07"
    finally:
        evil.close()
