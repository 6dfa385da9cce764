"""docs/router.md's compatibility table says the truth: its qdrouterd column matches the
qdrouter.json of the qdrouterd 1.19 build `QDROUTERD` names, its embedded column the embedded
router, and every (entity type, attribute) the router agent emits has a row."""
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from dataplane import qdrouterd
from dataplane.router import entities as E
from dataplane.router import views
from dataplane.router.management import Management
from dataplane.router.usage_ledger import UsageLedger
from tests.qdrouterd import SKIP_REASON
from workers.agents.router import desired as rc

from . import qdrouter_schema

ROOT = Path(__file__).resolve().parents[2]
HEADING = "## Compatibility: qdrouterd 1.19 and the embedded router"
OPERATION = "operation"
GROUP = "groups."


def table() -> list[dict]:
    """The rows of the first table after HEADING: {entity, name, qdrouterd, embedded, notes}."""
    text = (ROOT / "docs" / "router.md").read_text()
    assert HEADING in text, f"docs/router.md has no section {HEADING!r}"
    lines = text[text.index(HEADING):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip().replace("`", "") for c in line.strip().strip("|").split("|")]
        rows.append(cells)
    header, rule, *body = rows
    assert header == ["Entity type", "Attribute or operation", "qdrouterd 1.19", "embedded",
                      "Notes"], header
    assert set("".join(rule)) <= {"-", ":"}
    for cells in body:
        assert len(cells) == 5, cells
    return [dict(zip(("entity", "name", "qdrouterd", "embedded", "notes"), c, strict=True))
            for c in body]


def says(cell: str) -> bool:
    """yes (the router has it, maybe with a difference after "yes,") or no."""
    word = re.split(r"[\s,]", cell, maxsplit=1)[0].lower()
    assert word in ("yes", "no"), f"a cell must start with yes or no: {cell!r}"
    return word == "yes"


def rows_of(kind: str) -> list[dict]:
    rows = table()
    return [r for r in rows if (r["entity"] == OPERATION) == (kind == OPERATION)]


def test_the_table_has_the_rows_of_the_issue():
    names = {(r["entity"], r["name"]) for r in table()}
    for op in ("QUERY", "READ", "CREATE", "UPDATE", "DELETE", "GET-ATTRIBUTES"):
        assert (OPERATION, op) in names
    assert (E.PREFIX + "router", "uptimeSeconds") in names
    assert (rc.AUTO_LINK, "operStatus") in names
    assert len(names) == len(table()), "a row is repeated"


# qdrouterd -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def schema() -> dict:
    if qdrouterd.binary() is None:
        pytest.skip(SKIP_REASON)
    return qdrouter_schema.load(qdrouterd.binary())


def group_keys(schema: dict) -> set[str]:
    """The keys of a vhost group: qdrouter.json's vhostUserGroupSettings, or else the
    policy code's keywords (qpid_dispatch_internal/policy/policy_local.py)."""
    keys = qdrouter_schema.attributes(schema, "vhostUserGroupSettings")
    if keys is not None:
        return keys
    exe = Path(qdrouterd.binary())
    for base in [exe.parent.parent / "lib" / "qpid-dispatch" / "python",
                 Path("/work/qdr-build/dispatch-src/python")]:
        source = base / "qpid_dispatch_internal" / "policy" / "policy_local.py"
        if source.is_file():
            return set(re.findall(r'KW_\w+\s*=\s*"(\w+)"', source.read_text()))
    pytest.fail("neither vhostUserGroupSettings nor policy_local.py found for QDROUTERD")


def test_the_qdrouterd_column_matches_qdrouter_json(schema):
    wrong = []
    for row in rows_of("attribute"):
        if row["name"].startswith(GROUP):
            has = row["name"].removeprefix(GROUP) in group_keys(schema)
        else:
            attributes = qdrouter_schema.attributes(schema, row["entity"]) or set()
            has = row["name"] in attributes
        if has != says(row["qdrouterd"]):
            wrong.append((row["entity"], row["name"], row["qdrouterd"], has))
    assert not wrong, f"(type, attribute, table says, qdrouter.json has): {wrong}"


def test_the_qdrouterd_operations_match_qdrouter_json(schema):
    everywhere = set()
    for name in schema["entityTypes"]:
        everywhere |= qdrouter_schema.operations(schema, name)
    for row in rows_of(OPERATION):
        assert (row["name"] in everywhere) == says(row["qdrouterd"]), row
    # What the agent does with each of its types qdrouterd has: CREATE and DELETE everywhere,
    # UPDATE only where the table says (the vhost policy; the rest is replaced).
    for etype in rc.ENTITY_TYPES:
        ops = qdrouter_schema.operations(schema, etype)
        if ops is None:
            continue
        assert {"CREATE", "DELETE", "READ"} <= ops, etype
        assert ("UPDATE" in ops) == (etype == rc.VHOST), etype


# The embedded router -------------------------------------------------------------------------

def embedded_engine():
    """The parts of the embedded router's engine its management node and views read, with
    one usage counter entry (a `router.address` row without a node)."""
    counts = SimpleNamespace(ingress=0, egress=0, accepted=0, rejected=0, released=0,
                             modified=0, presettled=0, dropped_presettled=0)
    noop = lambda *_: None  # noqa: E731
    ledger = UsageLedger(configured=noop)
    ledger.attach("t.s/a", 0, False)
    return SimpleNamespace(
        store=E.EntityStore(), counts=counts, fwd=SimpleNamespace(nodes={}), links={},
        ledger=ledger, listeners=[], client_profiles={"broker": "ca.pem"},
        loop=SimpleNamespace(conns=[]), started=time.monotonic(),
        broker=SimpleNamespace(connector_created=noop, connector_deleted=noop,
                               autolink_created=noop, autolink_deleted=noop))


def embedded_attributes(etype: str) -> set[str]:
    if etype in E.SCHEMAS:
        return {"name", "identity", *E.SCHEMAS[etype].defaults}
    if etype in views.TYPES:
        return {key for row in views.rows(embedded_engine(), etype) for key in row}
    return set()


def test_the_embedded_column_matches_the_embedded_router():
    wrong = []
    for row in rows_of("attribute"):
        if row["name"].startswith(GROUP):
            has = row["name"].removeprefix(GROUP) in E.GROUP_KEYS
        else:
            has = row["name"] in embedded_attributes(row["entity"])
        if has != says(row["embedded"]):
            wrong.append((row["entity"], row["name"], row["embedded"], has))
    assert not wrong, f"(type, attribute, table says, embedded router has): {wrong}"


def test_the_group_keys_are_the_ones_the_embedded_policy_reads():
    policy = (ROOT / "dataplane" / "router" / "policy.py").read_text()
    for key in E.GROUP_KEYS:
        assert f'"{key}"' in policy, key


def test_the_embedded_operations_match_its_management_node():
    node = Management(embedded_engine())
    vhost = {"hostname": "t.s", "groups": {}}
    answers = {
        "CREATE": node.handle({"operation": "CREATE", "type": rc.VHOST, "name": "v"}, vhost),
        "READ": node.handle({"operation": "READ", "type": rc.VHOST, "name": "v"}, None),
        "UPDATE": node.handle({"operation": "UPDATE", "type": rc.VHOST, "name": "v"},
                              {"maxConnections": 5}),
        "QUERY": node.handle({"operation": "QUERY", "entityType": rc.VHOST},
                             {"attributeNames": []}),
        "GET-ATTRIBUTES": node.handle({"operation": "GET-ATTRIBUTES"}, None),
        "DELETE": node.handle({"operation": "DELETE", "type": rc.VHOST, "name": "v"}, None),
    }
    for row in rows_of(OPERATION):
        status, description, _ = answers.get(row["name"]) or node.handle(
            {"operation": row["name"], "type": rc.VHOST, "name": "v"}, None)
        assert (200 <= status < 300) == says(row["embedded"]), (row, status, description)


# What the agent emits ------------------------------------------------------------------------

@pytest.mark.django_db
def test_every_attribute_the_agent_emits_has_a_row(tenant, settings, tmp_path):
    from config_service import services
    from config_service.models import Address, MessagingUser
    from tests.conftest import CTX, b64
    from tests.connectors import connectors_spec

    settings.MAAS_CONNECTOR_TLS_DIR = str(tmp_path)

    space = services.create_address_space(ctx=CTX, tenant=tenant, name="compat",
                                          type="standard", plan="standard-medium")
    space.spec = connectors_spec()  # spec.connectors, as only qdrouterd takes them
    for address, type_, plan, extra in (
            ("a", "anycast", "standard-small-anycast", {}),
            ("m", "multicast", "standard-small-multicast", {}),
            ("q", "queue", "standard-small-queue", {}),
            ("t", "topic", "standard-small-topic", {}),
            ("s", "subscription", "standard-small-subscription", {"topic": "t"}),
            ("dlq", "deadletter", "standard-deadletter", {})):
        services.create_address(ctx=CTX, space=space, address=address, type=type_, plan=plan,
                                **extra)
    services.create_messaging_user(
        ctx=CTX, space=space, username="app",
        authentication={"type": "password", "password": b64("app-password")},
        authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
    addresses = list(Address.objects.filter(space=space, scheduled=True))
    assert {a.type for a in addresses} == {"anycast", "multicast", "queue", "topic",
                                           "subscription", "deadletter"}
    users = list(MessagingUser.objects.filter(space=space))
    broker = rc.BrokerLogin("broker.example", 5672, "$router-1@t.compat", "secret")

    emitted = set()
    for features in (rc.EMBEDDED, rc.RouterFeatures(connector_virtual_host=False)):
        desired, _ = rc.desired_entities(space, addresses, users, broker, features=features)
        for (etype, _name), attributes in desired.items():
            emitted |= {(etype, key) for key in attributes}
            for group in attributes.get("groups", {}).values() if etype == rc.VHOST else ():
                emitted |= {(etype, GROUP + key) for key in group}
    assert {t for t, _ in emitted} == set(rc.ENTITY_TYPES)
    assert (rc.CONNECTOR, "virtualHost") in emitted
    rows = {(r["entity"], r["name"]) for r in table()}
    assert not emitted - rows, f"no row in docs/router.md for {sorted(emitted - rows)}"
