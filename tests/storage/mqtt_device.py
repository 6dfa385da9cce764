"""Brokered spaces' MQTT for the tests: the relay that scopes client ids (a real process in
front of the test node's MQTT listener), and a paho MQTT 3.1.1 client of a space's vhost that
logs in as `<vhost>:<app@vhost>` and waits on conditions, never for a fixed time."""
import subprocess
import sys
import threading
import uuid

import paho.mqtt.client as paho

from tests.broker import MQTT_PORT
from tests.router.conftest import ROOT, free_port, wait_port
from workers.agents.storage.rabbitmq import broker_username

PASSWORD = "device-password"


class MqttRelay:
    """`python -m dataplane.vhost_relay --protocol mqtt` in front of the test node's MQTT."""

    def __init__(self, *options: str):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dataplane.vhost_relay", "--protocol", "mqtt",
             "--listen", f"127.0.0.1:{self.port}", "--broker", f"127.0.0.1:{MQTT_PORT}",
             "--log-level", "WARNING", *options], cwd=ROOT)
        wait_port(self.port, process=self.proc)

    def stop(self) -> None:
        alive = self.proc.poll() is None
        self.proc.terminate()
        self.proc.wait(5)
        assert alive, "the relay died during the test"


class Device:
    """A paho MQTT 3.1.1 client of one vhost that waits for what it expects."""

    def __init__(self, port: int, vhost: str, client_id: str, clean_session: bool = True,
                 tls_ca: str | None = None, password: str = PASSWORD):
        self.cond = threading.Condition()
        self.connack = None
        self.messages: list[bytes] = []
        self.dropped = threading.Event()
        self.c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id,
                             protocol=paho.MQTTv311, clean_session=clean_session)
        self.c.username_pw_set(f"{vhost}:{broker_username(vhost, 'app')}", password)
        self.c.on_connect = self._on_connect
        self.c.on_disconnect = lambda *_: self.dropped.set()
        self.c.on_message = self._on_message
        self.c.reconnect_delay_set(60, 60)  # a dropped device stays down: the test sees it
        if tls_ca:  # MQTTS, the chain and the host name (here the IP address) verified
            self.c.tls_set(ca_certs=tls_ca)
        self.c.connect("127.0.0.1", port, keepalive=30)
        self.c.loop_start()
        self.wait(lambda: self.connack is not None, "CONNACK")
        assert self.connack == 0, f"{client_id} of {vhost}: CONNACK {self.connack}"

    def _on_connect(self, client, userdata, flags, reason, properties):
        with self.cond:
            self.connack = reason.value
            self.cond.notify_all()

    def _on_message(self, client, userdata, message):
        with self.cond:
            self.messages.append(message.payload)
            self.cond.notify_all()

    def wait(self, predicate, what: str, timeout: float = 10.0) -> None:
        with self.cond:
            assert self.cond.wait_for(predicate, timeout), f"{what} not reached in {timeout} s"

    def round_trip(self) -> None:
        """Subscribes, publishes to itself at QoS 1 and gets it: the device is at work."""
        payload = uuid.uuid4().bytes
        self.c.subscribe("sensors/#", 1)
        info = self.c.publish("sensors/self", payload, qos=1)
        info.wait_for_publish(timeout=10)
        self.wait(lambda: payload in self.messages, "its own message")

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()
