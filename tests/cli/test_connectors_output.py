"""maasctl shows a space's connectors: `get -o wide` their readiness in a column, `describe`
their spec (no secret: the API never returns one) and status with the reasons."""
from maasctl import output
from maasctl.kinds import KINDS

SPACE = {
    "apiVersion": "enmasse.io/v1beta1", "kind": "AddressSpace",
    "metadata": {"name": "bridge", "namespace": "acme", "resourceVersion": "3"},
    "spec": {"type": "standard", "plan": "standard-medium", "connectors": [
        {"name": "site", "endpointHosts": [{"host": "amqp.eu.example", "port": 5671}],
         "credentials": {"username": {"value": "bridge"}},
         "addresses": [{"name": "orders", "pattern": "orders/*"}]}]},
    "status": {"phase": "Active", "isReady": True, "messages": [], "connectors": [
        {"name": "site", "isReady": False, "messages": [
            "Authentication refused by amqp.eu.example:5671: amqp:unauthorized-access "
            "Authentication failed [mech=PLAIN]"]},
        {"name": "rabbit", "isReady": True, "messages": []}]},
}


def test_get_wide_has_a_connectors_column():
    kind = next(k for k in KINDS if k.kind == "AddressSpace")
    header, row = output.objects_table(kind, [SPACE], wide=True).splitlines()
    at = header.index("CONNECTORS")
    assert row[at:].split()[0] == "site=notready,rabbit=ready"
    assert "CONNECTORS" not in output.objects_table(kind, [SPACE], wide=False)


def test_describe_shows_each_connector_and_why_it_is_not_ready():
    described = output.describe(SPACE)
    assert "  Connectors:\n    - Name:            site\n" in described
    assert "Pattern:  orders/*" in described
    assert "Authentication refused by amqp.eu.example:5671" in described
    assert "Is Ready:  false" in described
