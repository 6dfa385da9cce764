"""A space's `spec.connectors` for the tests that look at every entity the router agent emits:
one connector with credentials and TLS (a CA, a client certificate and its key), normalised and
sealed as the API stores it."""
from config_service import space_connectors
from tests.certs import bundle


def connectors_spec() -> dict:
    client = bundle("client.example")
    return {"connectors": space_connectors.validate([{
        "name": "remote", "endpointHosts": [{"host": "amqp.example.com", "port": 5671}],
        "tls": {"caCert": {"value": client.ca}, "clientCert": {"value": client.chain},
                "clientKey": {"value": client.key}},
        "credentials": {"username": {"value": "app"}, "password": {"value": "secret"}},
        "addresses": [{"name": "orders", "pattern": "orders/*"}],
        "idleTimeout": 30, "maxFrameSize": 65536}])}
