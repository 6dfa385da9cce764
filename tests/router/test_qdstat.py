"""qdrouterd's own tools against the embedded router: `qdstat -g/-c/-l/-a` and `qdmanage
query/read/create/delete/get-attributes` from the qdrouterd build that QDROUTERD names (run with
this interpreter's proton), and the requests they send, from Python, everywhere: GET-TYPES,
GET-ATTRIBUTES, GET-OPERATIONS, GET-ANNOTATIONS, GET-SCHEMA, READ of the router as `self`,
QUERY of listener, log and sslProfile, short type names."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dataplane import qdrouterd

from .conftest import ADDRESS, ADMIN_PASSWORD, ADMIN_USER, add_tenant, broker_ca_args

PREFIX = "org.apache.qpid.dispatch."
# What qdstat -g, -c, -l and -a read of each type (qpid-dispatch 1.19 tools/qdstat)
READ_BY_QDSTAT = {
    "router": {"id", "mode", "version", "area", "workerThreads", "uptimeSeconds", "memoryUsage",
               "linkCount", "addrCount", "connectionCount", "deliveriesStuck",
               "deliveriesIngressRouteContainer", "deliveriesRedirectedToFallback"},
    "connection": {"identity", "host", "container", "role", "protocol", "dir", "isEncrypted",
                   "sasl", "user", "tenant", "lastDlvSeconds", "uptimeSeconds"},
    "router.link": {"linkType", "linkDir", "connectionId", "identity", "peer", "owningAddr",
                    "capacity", "undeliveredCount", "unsettledCount", "deliveryCount",
                    "presettledCount", "droppedPresettledCount", "creditAvailable",
                    "zeroCreditSeconds", "priority", "settleRate"},
    "router.address": {"distribution", "inProcess", "subscriberCount", "remoteCount",
                       "containerCount", "deliveriesIngress", "deliveriesEgress",
                       "deliveriesRedirectedToFallback", "deliveriesTransit", "priority"},
}


@pytest.fixture(scope="module", autouse=True)
def tenant(mgmt, router):
    add_tenant(mgmt, "qds", {"quinn": "quinn-pw"},
               {"all": {"users": "quinn", "sources": "*", "targets": "*"}})
    mgmt.create(ADDRESS, "qds-orders", prefix="qds/orders")
    conn = router.connect("quinn", "quinn-pw", vhost="qds")
    conn.create_receiver("orders", credit=5)  # a link and an address node to show
    yield
    conn.close()


def test_get_attributes_lists_what_qdstat_reads(mgmt):
    status, _, body = mgmt.request("GET-ATTRIBUTES", entityType=None)

    assert status == 200
    for short, wanted in READ_BY_QDSTAT.items():
        assert wanted <= set(body[PREFIX + short]), short


def test_short_type_names_and_the_management_nodes_own_type(mgmt):
    # qdmanage sends `type: org.amqp.management` with `entityType` for the GET-* operations
    status, _, body = mgmt.request("GET-ATTRIBUTES", type="org.amqp.management",
                                   entityType="router")
    assert status == 200 and list(body) == [PREFIX + "router"]
    status, _, body = mgmt.request("GET-OPERATIONS", type="org.amqp.management",
                                   entityType="address")
    assert body == {PREFIX + "router.config.address": ["CREATE", "READ", "UPDATE", "DELETE",
                                                       "QUERY"]}


def test_operations_annotations_and_schema(mgmt):
    _, _, operations = mgmt.request("GET-OPERATIONS")
    status, _, annotations = mgmt.request("GET-ANNOTATIONS")
    schema_status, _, schema = mgmt.request("GET-SCHEMA")

    assert operations[PREFIX + "router.link"] == ["READ", "QUERY"]
    assert operations[PREFIX + "vhost"][0] == "CREATE"
    assert status == 200 and annotations[PREFIX + "router"] == []
    assert schema_status == 200
    assert "memoryUsage" in schema["entityTypes"][PREFIX + "router"]["attributes"]


def test_the_router_reads_as_self_and_listeners_logs_profiles_query(mgmt, router):
    status, _, me = mgmt.request("READ", type=PREFIX + "router", identity="self")
    listeners = mgmt.query(PREFIX + "listener", ["host", "port", "requireSsl"])
    logs = mgmt.query(PREFIX + "log", ["module", "enable"])
    profiles = mgmt.query(PREFIX + "sslProfile", ["name"])

    assert status == 200 and me["id"] == "maas-router" and me["mode"] == "standalone"
    ports = {int(row["port"]): row["requireSsl"] for row in listeners}
    assert ports[router.amqp_port] is False and ports[router.mgmt_port] is False
    assert logs == [{"module": "DEFAULT", "enable": "info+"}]
    # this router has no TLS listener (tests/router/test_tls.py starts one that has); its one
    # profile is the connectors' to the brokers' TLS listeners, where they have them
    assert True not in ports.values()
    assert profiles == ([{"name": "broker"}] if broker_ca_args() else [])


def test_query_pages_with_count_and_offset(mgmt):
    for i in range(5):
        mgmt.create(ADDRESS, f"qds-page-{i}", prefix=f"qds/page{i}")
    seen = []
    for offset in range(0, 10, 2):
        status, _, body = mgmt.request("QUERY", {"attributeNames": ["name"]},
                                       entityType=PREFIX + "router.config.address",
                                       count=2, offset=offset)
        assert status == 200 and len(body["results"]) <= 2
        seen += [row[0] for row in body["results"]]

    assert {f"qds-page-{i}" for i in range(5)} <= set(seen)
    assert len(seen) == len(set(seen))


def tools() -> tuple[Path, dict] | None:
    """qdstat's directory and the environment it needs, from the build QDROUTERD names."""
    binary = qdrouterd.binary()
    if not binary:
        return None
    # Beside the binary QDROUTERD names, or beside the file a link of that name points to.
    bindir = next((d for d in (Path(binary).parent, Path(binary).resolve().parent)
                   if (d / "qdstat").exists()), None)
    if bindir is None:
        return None
    package = next((p.parent for p in sorted(bindir.parent.glob("**/qpid_dispatch/__init__.py"))
                    if "management" in {c.name for c in p.parent.iterdir()}), None)
    if package is None:
        return None
    return bindir, dict(os.environ, PYTHONPATH=str(package.parent))


def run(tool: str, router, *args: str) -> str:
    found = tools()
    if found is None:
        pytest.skip("QDROUTERD names no qdrouterd build with qdstat/qdmanage (docs/router.md)")
    bindir, env = found
    done = subprocess.run(
        [sys.executable, str(bindir / tool), *args, "-b", f"127.0.0.1:{router.mgmt_port}",
         "--sasl-username", ADMIN_USER, "--sasl-password", ADMIN_PASSWORD, "-t", "5"],
        env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_qdstat_shows_general_connections_links_and_addresses(router):
    general = run("qdstat", router, "-g")
    connections = run("qdstat", router, "-c")
    links = run("qdstat", router, "-l")
    addresses = run("qdstat", router, "-a")

    assert "maas-router" in general and "Connections" in general
    assert "quinn@qds" in connections
    assert "qds/orders" in links and "mobile" in links
    assert "qds/orders" in addresses and "balanced" in addresses


def test_qdmanage_reads_queries_creates_and_deletes(router):
    me = json.loads(run("qdmanage", router, "read", "--type=router", "--identity=self"))
    created = json.loads(run("qdmanage", router, "create", "--type=address",
                             "--name=qds-tool", "prefix=qds/tool"))
    listed = json.loads(run("qdmanage", router, "query", "--type=address"))
    run("qdmanage", router, "delete", "--type=address", "--name=qds-tool")
    after = json.loads(run("qdmanage", router, "query", "--type=address"))
    attributes = json.loads(run("qdmanage", router, "get-attributes", "--type=router"))

    assert me["id"] == "maas-router"
    assert created["prefix"] == "qds/tool"
    assert "qds-tool" in {a["name"] for a in listed}
    assert "qds-tool" not in {a["name"] for a in after}
    assert "memoryUsage" in attributes[PREFIX + "router"]
