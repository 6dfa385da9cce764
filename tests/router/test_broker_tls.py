"""The embedded router reaches RabbitMQ's TLS listener (AMQPS) with its client profile `broker`
(`--broker-ca`, the internal CA): a connector naming it checks the broker's certificate and
host name, and its autoLinks move messages as over plain AMQP. A broker certificate another
CA signed is refused, and so is a connector naming a profile the router lacks; each says why
in its connectionMsg. Real routers, the test RabbitMQ node's TLS listener (deploy/local/
rabbitmq-nodes.sh, signed by the internal CA deploy/local/services.sh makes)."""
import pytest
from django.conf import settings
from proton import Message

from config_service.brokers import internal_ca
from workers.agents.router.certificates import ensure_internal_certificates

from .conftest import ADDRESS, AUTO_LINK, CONNECTOR, RouterProcess, add_tenant, pump_until

GROUP = {"users": "bo", "sources": "*", "targets": "*"}
CONNECTION = "org.apache.qpid.dispatch.connection"


@pytest.fixture(autouse=True)
def the_internal_ca():
    assert internal_ca(), "no internal CA: deploy/local/services.sh makes it"


def connector(mgmt, name: str, vhost: str, profile: str = "broker") -> None:
    mgmt.create(CONNECTOR, name, host="127.0.0.1", port=str(settings.RABBITMQ_AMQPS_PORT),
                role="route-container", saslUsername="guest", saslPassword="guest",
                virtualHost=f"vhost:{vhost}", sslProfile=profile)


def row(mgmt, etype: str, name: str, attribute: str):
    return next(r[attribute] for r in mgmt.query(etype, ["name", attribute])
                if r["name"] == name)


def test_a_queue_reached_over_tls_moves_messages(router, mgmt, rabbit):
    rabbit.queue("secure")
    add_tenant(mgmt, "tl", {"bo": "bo-pw"}, {"all": GROUP})
    connector(mgmt, "tl-broker", rabbit.vhost)
    mgmt.create(ADDRESS, "tl-secure", prefix="tl/secure", waypoint=True)
    for direction in ("in", "out"):
        mgmt.create(AUTO_LINK, f"tl-secure-{direction}", address="tl/secure",
                    direction=direction, connection="tl-broker",
                    externalAddress="/amq/queue/secure")
    pump_until(lambda: row(mgmt, AUTO_LINK, "tl-secure-in", "operStatus") == "active",
               mgmt.conn, timeout=15)
    assert row(mgmt, CONNECTOR, "tl-broker", "connectionStatus") == "SUCCESS"
    encrypted = [r for r in mgmt.query(CONNECTION, ["role", "isEncrypted"])
                 if r["role"] == "route-container"]
    assert encrypted and all(r["isEncrypted"] for r in encrypted)

    conn = router.connect("bo@tl", "bo-pw")
    try:
        conn.create_sender("secure").send(Message(body="over tls", durable=True))
        receiver = conn.create_receiver("secure")
        assert receiver.receive(10).body == "over tls"
        receiver.accept()
    finally:
        conn.close()


def test_a_certificate_of_another_ca_and_an_unknown_profile_are_refused(rabbit, tmp_path):
    other_ca, _, _ = ensure_internal_certificates(str(tmp_path / "other"), ["x"])["x"]
    router = RouterProcess(extra_args=["--broker-ca", other_ca])
    router.start()
    mgmt = router.management()
    try:
        connector(mgmt, "untrusted", rabbit.vhost)
        connector(mgmt, "unknown", rabbit.vhost, profile="nope")
        pump_until(lambda: "certificate" in (row(mgmt, CONNECTOR, "untrusted",
                                                  "connectionMsg") or ""),
                   mgmt.conn, timeout=15)
        assert row(mgmt, CONNECTOR, "untrusted", "connectionStatus") == "FAILED"
        assert row(mgmt, CONNECTOR, "unknown", "connectionStatus") == "FAILED"
        assert row(mgmt, CONNECTOR, "unknown", "connectionMsg") == (
            "no sslProfile 'nope' on this router")
    finally:
        mgmt.close()
        router.stop()
