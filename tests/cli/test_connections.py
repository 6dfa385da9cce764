"""maasctl on a space's client connections, against the live API, the embedded router and real
proton clients: `get connections` lists who is connected (table, filters, -o json as the API
returns it), `describe connection` shows the links, `delete connection` closes one (the client
sees it), a viewer is refused, and an unknown id or a missing space is said plainly."""
import json

import pytest
from drf_spectacular.generators import SchemaGenerator
from maasctl import kinds
from proton import ConnectionException

from config_service import services
from tests.conftest import CTX
from tests.workers.conftest import router_settings, sync  # noqa: F401 - fixture used here
from tests.workers.connected import connect, exchange, standard_space

from .conftest import Maasctl, ok

pytestmark = pytest.mark.slow

COLUMNS = ["NAME", "USER", "PROTOCOL", "HOST", "CONTAINER", "SENDERS", "RECEIVERS", "IN", "OUT",
           "AGE"]


class Connected:
    """A standard space with two clients of user `app`: one sent three messages to `orders`,
    the other received them."""

    def __init__(self, router, tenant):
        self.space = standard_space(tenant)
        self.receiving = connect(router, self.space, "receiving-app")
        self.sending = connect(router, self.space, "sending-app")
        exchange(self.sending, self.receiving, 3)

    def close(self):
        for conn in (self.receiving, self.sending):
            try:
                conn.close()
            except ConnectionException:  # the one maasctl closed
                pass
        services.delete_address_space(ctx=CTX, space=self.space)
        sync(self.space)


@pytest.fixture
def connected(router, tenant):
    c = Connected(router, tenant)
    yield c
    c.close()


def _api(clients, tenant, space, connection=""):
    url = f"/api/v1/tenants/{tenant.slug}/addressspaces/{space}/connections/"
    response = clients["owner"].get(f"{url}{connection}/" if connection else url)
    assert response.status_code == 200, response.content
    return response.json()


def _steady(obj: dict) -> dict:
    """The object without its creationTimestamp, which moves by a second between reads: the
    router reports a connection's uptime in whole seconds."""
    meta = {k: v for k, v in obj["metadata"].items() if k != "creationTimestamp"}
    return {**obj, "metadata": meta}


def test_get_lists_the_clients_and_describe_shows_their_links(cli, connected, clients, tenant):
    space = connected.space.name
    listed = _api(clients, tenant, space)["items"]
    by_container = {c["spec"]["containerId"]: c for c in listed}
    sending, receiving = by_container["sending-app"], by_container["receiving-app"]

    rows = ok(cli("get", "connections", "-s", space)).splitlines()
    assert rows[0].split() == COLUMNS
    assert sorted(r.split()[:9] for r in rows[1:]) == sorted([
        [sending["metadata"]["name"], "app", "amqp", sending["spec"]["hostname"], "sending-app",
         "1", "0", "3", "0"],
        [receiving["metadata"]["name"], "app", "amqp", receiving["spec"]["hostname"],
         "receiving-app", "0", "1", "0", "3"],
    ])
    wide = ok(cli("get", "conn", "-s", space, "-o", "wide")).splitlines()
    assert wide[0].split()[-3:] == ["VIA", "ENCRYPTED", "MECHANISM"]
    assert wide[1].split()[-3:] == ["router", "false", "PLAIN"]

    # -o json: the API's objects, in a List as for every kind
    as_json = json.loads(ok(cli("get", "connections", "-s", space, "-o", "json")))
    assert as_json["kind"] == "List"
    assert [_steady(c) for c in as_json["items"]] == [_steady(c) for c in listed]
    one = json.loads(ok(cli("get", "connection", receiving["metadata"]["name"], "-s", space,
                            "-o", "json")))
    assert _steady(one) == _steady(_api(clients, tenant, space, receiving["metadata"]["name"]))
    assert [(link["role"], link["address"]) for link in one["links"]] == [("receiver", "orders")]

    # filters are the API's
    assert ok(cli("get", "connections", "-s", space, "--search", "sending", "-o", "name")) == \
        f"connection.maas.io/{space}.{sending['metadata']['name']}\n"
    assert len(ok(cli("get", "connections", "-s", space, "--user", "app", "--via", "router",
                      "--protocol", "amqp", "-o", "name")).splitlines()) == 2
    none = cli("get", "connections", "-s", space, "--protocol", "mqtt")
    assert (none.returncode, none.stdout) == (0, "")
    assert none.stderr == f"No connections found in tenant {tenant.slug} in address space " \
                          f"{space}.\n"

    described = ok(cli("describe", "connection", receiving["metadata"]["name"], "-s", space))
    assert f"Name:             {receiving['metadata']['name']}" in described
    assert f"Address Space:    {space}" in described
    assert "  Container Id:    receiving-app" in described
    assert "  Messages Out:  3" in described
    links = described.split("Links:\n")[1].splitlines()
    assert links[0].split()[:11] == ["ROLE", "ADDRESS", "DELIVERIES", "CREDIT", "UNSETTLED",
                                     "ACCEPTED", "REJECTED", "RELEASED", "MODIFIED",
                                     "PRESETTLED", "UNDELIVERED"]
    assert links[1].split()[:3] == ["receiver", "orders", "3"]


def test_delete_closes_the_connection_but_not_for_a_viewer(cli, outsider_cli, connected, viewer,
                                                          tmp_path, live_server, clients, tenant):
    space = connected.space.name
    listed = _api(clients, tenant, space)["items"]
    sending = next(c["metadata"]["name"] for c in listed
                   if c["spec"]["containerId"] == "sending-app")
    viewer_cli = Maasctl(tmp_path / "viewer" / "config.json", live_server.url)
    ok(viewer_cli.login(viewer))

    refused = viewer_cli("delete", "connection", sending, "-s", space)
    assert refused.returncode == 1
    assert refused.stderr.startswith("Error from server (Forbidden): ")
    hidden = outsider_cli("delete", "connection", sending, "-s", space)
    assert hidden.returncode == 1
    assert hidden.stderr.startswith("Error from server (NotFound): ")
    unknown = cli("delete", "connection", "router-999999", "-s", space)
    assert unknown.returncode == 1
    assert unknown.stderr.startswith(f'Error from server (NotFound): connections.maas.io '
                                     f'"{space}.router-999999" not found')
    assert len(_api(clients, tenant, space)["items"]) == 2

    # named `<space>.<id>`, as -o name prints it
    assert ok(cli("delete", "connection", f"{space}.{sending}")) == \
        f'connection.maas.io "{space}.{sending}" closed\n'
    with pytest.raises(ConnectionException, match="forced"):
        connected.sending.wait(lambda: False, timeout=10)
    connected.sending.close()  # answers the close, as a client does: the router lets it go
    assert ok(cli("wait", "connection", sending, "-s", space, "--for=delete",
                  "--timeout=10s")) == f"connection.maas.io/{space}.{sending} condition met\n"
    rows = ok(cli("get", "connections", "-s", space)).splitlines()
    assert [r.split()[4] for r in rows[1:]] == ["receiving-app"]


def test_a_connection_needs_its_space_and_its_filters_need_connections(cli):
    cases = {
        ("get", "connections"): "connections are listed one address space at a time: "
                                "give -s SPACE",
        ("describe", "connection", "router-1"): 'address space of connection "router-1": '
                                                "-s SPACE",
        ("delete", "conn", "router-1"): "-s SPACE, or name it <address space>.<id>",
        ("get", "addresses", "--protocol", "amqp"): "--protocol: only for connections",
        ("get", "connections", "-s", "x", "--via", "nowhere"): "invalid choice: 'nowhere'",
    }
    for args, text in cases.items():
        result = cli(*args)
        assert result.returncode == 2, (args, result.returncode, result.stderr)
        assert text in result.stderr, (args, result.stderr)


def test_the_connection_paths_it_calls_are_declared_in_the_openapi_schema():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    (kind,) = kinds.LIVE
    collection = "/api/v1/" + kind.list_path("{tenant}", "{space}")
    assert set(schema["paths"][collection]) == {"get"}
    assert set(schema["paths"][collection + "{connection}/"]) == {"get", "delete"}
