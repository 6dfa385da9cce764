"""The gateway with Mosquitto's own command-line clients (Debian `mosquitto-clients`), over
plain MQTT and MQTTS (the router's certificate), and how `make run` starts it."""
import subprocess
import time

import pytest

from maas.management.commands.runplatform import processes
from tests.mqtt.conftest import PASSWORD, Client, GatewayProcess, add, user
from tests.workers.conftest import sync
from workers.agents.router.certificates import ensure_self_signed

pytestmark = pytest.mark.django_db(transaction=True)
BOTH_ROUTERS = True  # tests/mqtt/conftest.py: the embedded router and qdrouterd


def mosquitto_sub(port, login, topic, count, qos=1, extra=()):
    return subprocess.Popen(
        ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), "-u", login, "-P", PASSWORD,
         "-t", topic, "-q", str(qos), "-C", str(count), "-W", "15", "-v", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def mosquitto_pub(port, login, topic, message, qos=1, extra=()):
    run = subprocess.run(
        ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(port), "-u", login, "-P", PASSWORD,
         "-t", topic, "-m", message, "-q", str(qos), *extra], capture_output=True, text=True,
        timeout=15)
    assert run.returncode == 0, run.stderr


def wait_subscribed(proc, seconds=1.0):
    """mosquitto_sub prints nothing on SUBACK: give it time to get there."""
    time.sleep(seconds)
    assert proc.poll() is None, proc.communicate()


def test_mosquitto_clients_exchange_qos0_and_qos1_messages_through_the_gateway(gateway, space):
    add(space, "events", "multicast", "standard-small-multicast")
    user(space)
    sync(space)
    login = f"app@{space.vhost}"
    sub = mosquitto_sub(gateway.port, login, "events", 2)
    wait_subscribed(sub)
    mosquitto_pub(gateway.port, login, "events", "first", qos=0)
    mosquitto_pub(gateway.port, login, "events", "second", qos=1)
    out, err = sub.communicate(timeout=20)
    assert sub.returncode == 0, err
    assert out.splitlines() == ["events first", "events second"]


def test_mosquitto_clients_reach_the_gateway_over_tls_with_the_routers_certificate(
        router, space, tmp_path):
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    ensure_self_signed(cert, key, "127.0.0.1")
    gw = GatewayProcess(router.amqp_port, cert, key)
    gw.start()
    try:
        add(space, "events", "multicast", "standard-small-multicast")
        user(space)
        sync(space)
        login = f"app@{space.vhost}"
        tls = ("--cafile", cert, "--insecure")  # a self-signed certificate for 127.0.0.1
        sub = mosquitto_sub(gw.tls_port, login, "events", 1, extra=tls)
        wait_subscribed(sub)
        mosquitto_pub(gw.tls_port, login, "events", "over tls", extra=tls)
        out, err = sub.communicate(timeout=20)
        assert out.splitlines() == ["events over tls"], err
        # and the plain port of the same process still works for paho
        c = Client(gw, space)
        assert c.connected() == 0
        c.close()
    finally:
        gw.stop()


def test_make_run_starts_the_gateway_with_the_router_and_not_without_it(settings):
    assert processes("127.0.0.1:8000")["mqtt-gateway"][2:] == ["run_mqtt_gateway"]
    settings.MAAS_MQTT_GATEWAY_ENABLED = False
    assert "mqtt-gateway" not in processes("127.0.0.1:8000")
    settings.MAAS_MQTT_GATEWAY_ENABLED = True
    settings.MAAS_ROUTER_ENABLED = False
    assert "mqtt-gateway" not in processes("127.0.0.1:8000")
