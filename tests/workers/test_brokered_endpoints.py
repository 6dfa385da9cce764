"""A brokered space as its tenant uses it: `status.endpointStatuses` lists AMQP and AMQPS on
the brokered-amqp relay and MQTT and MQTTS on the MQTT relay, `status.caCert` is the
certificate they serve, and a client that takes nothing but what the status says (host,
ports, CA, login) reaches its queue and topic by their names, verifying the chain and the host
name. Real relay processes in front of the test node; the space made through the API and its
storage agent run."""
import base64

import pytest
from proton import Message, SSLDomain
from proton.utils import BlockingConnection

from config_service import services
from config_service.models import AddressSpace
from tests import broker
from tests.conftest import CTX, b64, space_manifest
from tests.storage.mqtt_device import Device
from tests.storage.relays import Front, self_signed
from workers.agents import runner

PASSWORD = "endpoint-password"


@pytest.fixture
def relays(settings, tmp_path):
    cert, key = self_signed(tmp_path)
    amqp = Front("brokered-amqp", broker.AMQP_PORT, cert, key)
    mqtt = Front("mqtt", broker.MQTT_PORT, cert, key)
    settings.MAAS_ROUTER_TLS_CERT, settings.MAAS_ROUTER_TLS_KEY = cert, key
    settings.MAAS_PUBLIC_HOST = "localhost"  # a name: proton checks DNS names, not IPs
    settings.MAAS_BROKERED_AMQP_PORT, settings.MAAS_BROKERED_AMQPS_PORT = amqp.port, amqp.tls_port
    settings.MAAS_MQTT_RELAY_PORT, settings.MAAS_MQTT_RELAY_TLS_PORT = mqtt.port, mqtt.tls_port
    yield amqp, mqtt
    amqp.stop()
    mqtt.stop()


def test_a_client_reaches_a_brokered_space_by_what_its_status_says(relays, tenant, clients,
                                                                   tmp_path, redis_server):
    amqp, mqtt = relays
    url = f"/api/v1/tenants/{tenant.slug}/addressspaces/"
    assert clients["owner"].post(url, space_manifest("shop"), format="json").status_code == 201
    space = AddressSpace.objects.get(tenant=tenant, name="shop")
    services.create_address(ctx=CTX, space=space, address="orders", type="queue",
                            plan="brokered-queue")
    services.create_address(ctx=CTX, space=space, address="sensors", type="topic",
                            plan="brokered-topic")
    services.create_messaging_user(
        ctx=CTX, space=space, username="app",
        authentication={"type": "password", "password": b64(PASSWORD)},
        authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
    try:
        runner.run(space.uid, "storage")
        status = clients["owner"].get(f"{url}shop/").json()["status"]
        ports = {(e["name"], p["name"]): p["port"]
                 for e in status["endpointStatuses"] for p in e["servicePorts"]}
        assert ports == {("messaging", "amqp"): amqp.port, ("messaging", "amqps"): amqp.tls_port,
                         ("mqtt", "mqtt"): mqtt.port, ("mqtt", "mqtts"): mqtt.tls_port}
        ca = tmp_path / "ca-from-status.pem"
        ca.write_bytes(base64.b64decode(status["caCert"]))
        messaging = next(e for e in status["endpointStatuses"] if e["name"] == "messaging")
        login = messaging["username"].replace("<username>", "app")

        domain = SSLDomain(SSLDomain.MODE_CLIENT)
        domain.set_trusted_ca_db(str(ca))
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
        conn = BlockingConnection(
            f"amqps://{messaging['serviceHost']}:{ports[('messaging', 'amqps')]}", user=login,
            password=PASSWORD, ssl_domain=domain, allowed_mechs="PLAIN", timeout=10)
        try:
            receiver = conn.create_receiver("orders")
            conn.create_sender("orders").send(Message(body="by name", durable=True))
            assert receiver.receive(10).body == "by name"
            receiver.accept()
        finally:
            conn.close()

        device = Device(ports[("mqtt", "mqtts")], space.vhost, "endpoint-device",
                        tls_ca=str(ca), password=PASSWORD)
        try:
            device.round_trip()  # subscribes to and publishes on sensors/...
        finally:
            device.close()
    finally:
        services.delete_address_space(ctx=CTX, space=space)
        runner.run(space.uid, "storage")
