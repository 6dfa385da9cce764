"""The MQTT gateway end to end: paho clients -> gateway process -> the real embedded router ->
RabbitMQ (topics) or the router itself (anycast, multicast) -> paho or proton clients."""
import socket
import subprocess
import uuid

import pytest
from proton import Message

from config_service import services
from core.amqp import open_receiver, open_sender
from dataplane.gateway import codec
from tenants.services import create_tenant
from tests.conftest import CTX, make_user, wait_for
from tests.mqtt.conftest import PASSWORD, Client, GatewayProcess, add, user
from tests.router.conftest import pump
from tests.workers.conftest import sync
from tests.workers.test_standard_space_e2e import connect, wait_for_bindings

pytestmark = pytest.mark.django_db(transaction=True)
BOTH_ROUTERS = True  # the gateway is an AMQP client of whichever router the space has


@pytest.fixture
def other_tenant(redis_server):
    return create_tenant(ctx=CTX, slug=f"other-{uuid.uuid4().hex[:6]}",
                         owner=make_user(f"o{uuid.uuid4().hex[:6]}"))


def test_qos0_and_qos1_go_from_mqtt_to_mqtt_on_a_multicast_address(gateway, space):
    add(space, "events", "multicast", "standard-small-multicast")
    user(space)
    sync(space)
    sub, pub = Client(gateway, space), Client(gateway, space)
    assert sub.connected() == 0 and pub.connected() == 0
    assert sub.subscribe("events", qos=1) == [1]
    pub.publish("events", b"zero", qos=0)
    pub.publish("events", b"one", qos=1)
    got = sub.received(2)
    assert [(m.topic, m.payload) for m in got] == [("events", b"zero"), ("events", b"one")]
    sub.close()
    pub.close()


def test_qos1_goes_both_ways_between_mqtt_and_amqp_on_an_anycast_address(router, gateway, space):
    add(space, "rpc", "anycast", "standard-small-anycast")
    user(space)
    sync(space)
    conn = connect(router, space)
    receiver = open_receiver(conn, "rpc", credit=10)
    pub = Client(gateway, space)
    info = pub.client.publish("rpc", b"to-amqp", qos=1)
    msg = receiver.receive(5)
    assert not info.is_published()  # PUBACK only once the AMQP receiver accepted it
    receiver.accept()
    pump(conn)
    info.wait_for_publish(5)
    assert bytes(msg.body) == b"to-amqp" and info.is_published()
    sub = Client(gateway, space)
    assert sub.subscribe("rpc", qos=1) == [1]
    receiver.close()
    sender = open_sender(conn, "rpc")
    sender.send(Message(body="from-amqp"))  # accepted once the MQTT client PUBACKed
    got = sub.received(1)
    assert (got[0].topic, got[0].payload, got[0].qos) == ("rpc", b"from-amqp", 1)
    conn.close()
    sub.close()
    pub.close()


def test_topic_subtopics_map_both_ways_and_wildcards_select_them(router, gateway, space):
    add(space, "sensors", "topic", "standard-small-topic")
    user(space)
    sync(space)
    sub = Client(gateway, space)
    assert sub.subscribe("sensors/+/temp", qos=1) == [1]
    everything = Client(gateway, space)
    assert everything.subscribe("#", qos=0) == [0]
    wait_for_bindings(space, "sensors", 1)  # the `sensors/*.temp` receiver (`#` is the fanout)
    pub = Client(gateway, space)
    pub.publish("sensors/room1/temp", b"21", qos=1)
    pub.publish("sensors/room1/humidity", b"40", qos=0)
    pub.publish("sensors/room2/temp", b"19", qos=0)
    conn = connect(router, space)
    # an AMQP publisher names the subtopic in the subject (docs/mqtt.md)
    open_sender(conn, "sensors").send(Message(body=b"18", subject="room3.temp"))
    got = sub.received(3)
    assert sorted((m.topic, m.payload) for m in got) == [
        ("sensors/room1/temp", b"21"), ("sensors/room2/temp", b"19"),
        ("sensors/room3/temp", b"18")]
    assert sorted(m.topic for m in everything.received(4)) == [
        "sensors/room1/humidity", "sensors/room1/temp", "sensors/room2/temp",
        "sensors/room3/temp"]
    # MQTT to AMQP: a receiver of the subtopic gets the MQTT publish
    amqp = open_receiver(conn, "sensors/room9.temp", credit=10)
    wait_for_bindings(space, "sensors", 2)
    pub.publish("sensors/room9/temp", b"25", qos=1)
    assert bytes(amqp.receive(5).body) == b"25"
    amqp.accept()
    conn.close()
    for c in (sub, everything, pub):
        c.close()


def test_a_wrong_password_gets_connack_4_and_another_tenants_user_cannot_reach_the_space(
        gateway, space, other_tenant):
    add(space, "events", "multicast", "standard-small-multicast")
    user(space)
    sync(space)
    # paho reports MQTT 3.1.1's CONNACK 4 (bad user name or password) as MQTT 5's 134
    wrong = Client(gateway, space, password="not-the-password")
    assert wrong.connected() == 134
    assert wrong.disconnected.wait(5)
    # the login names the space: a user of no space of this name is refused by the auth service
    other = Client(gateway, space, username="stranger")
    assert other.connected() == 134
    # another tenant's user, with its own right password, cannot name this space
    outsider_space = services.create_address_space(
        ctx=CTX, tenant=other_tenant, name="elsewhere", type="standard", plan="standard-medium")
    add(outsider_space, "events", "multicast", "standard-small-multicast")
    user(outsider_space, "intruder")
    sync(outsider_space)
    assert Client(gateway, outsider_space, username="intruder").connected() == 0  # at home
    login = f"intruder@{space.vhost}"
    run = subprocess.run(["mosquitto_sub", "-p", str(gateway.port), "-u", login, "-P", PASSWORD,
                          "-t", "events", "-C", "1", "-W", "5"], capture_output=True, text=True)
    assert run.returncode != 0 and "not authorised" in run.stderr.lower() + run.stdout.lower() \
        or "bad user name or password" in (run.stderr + run.stdout).lower(), run


def test_a_user_without_rights_gets_suback_0x80_and_is_disconnected_on_publish(gateway, space):
    add(space, "events", "multicast", "standard-small-multicast")
    add(space, "secret", "multicast", "standard-small-multicast")
    user(space, "limited", rules=[{"addresses": ["events"], "operations": ["recv"]}])
    sync(space)
    c = Client(gateway, space, username="limited")
    assert c.connected() == 0
    assert c.subscribe("events", qos=1) == [1]
    assert c.subscribe("secret", qos=1) == [0x80]
    assert c.subscribe("nowhere/#", qos=0) == [0x80]  # no such address in the space
    c.client.publish("events", b"not allowed", qos=1)
    assert c.disconnected.wait(5)  # MQTT 3.1.1 refuses a PUBLISH only by closing
    c.client.loop_stop()


@pytest.mark.slow  # several seconds of waiting: not for the inner loop
def test_qos0_goes_both_ways_and_a_publisher_nobody_takes_from_is_held_back(
        router, gateway, space):
    add(space, "rpc", "anycast", "standard-small-anycast")
    user(space)
    sync(space)
    conn = connect(router, space)
    receiver = open_receiver(conn, "rpc", credit=10)
    pub = Client(gateway, space)
    pub.publish("rpc", b"qos0 to amqp", qos=0)
    assert bytes(receiver.receive(5).body) == b"qos0 to amqp"
    receiver.close()
    sub = Client(gateway, space)
    assert sub.subscribe("rpc", qos=0) == [0]
    open_sender(conn, "rpc").send(Message(body="qos0 from amqp"))
    got = sub.received(1)
    assert (got[0].topic, got[0].payload, got[0].qos) == ("rpc", b"qos0 from amqp", 0)
    sub.close()
    # nobody receives: the router gives no credit, and the gateway stops reading the publisher
    # (its socket buffers fill) instead of queueing without bound; 20 MB never all get in
    raw = socket.create_connection(("127.0.0.1", gateway.port), timeout=5)
    raw.sendall(codec.connect("flood", f"app@{space.vhost}", PASSWORD.encode()))
    assert raw.recv(4) == codec.connack(codec.ACCEPTED)
    packet = codec.publish("rpc", b"x" * 1000)
    raw.settimeout(5)
    with pytest.raises(TimeoutError):
        raw.sendall(packet * 20000)
    late = open_receiver(conn, "rpc", credit=100)
    assert bytes(late.receive(10).body) == b"x" * 1000  # what waited goes out to a receiver
    raw.close()
    pub.close()
    conn.close()


def gateway_figures(gateway) -> dict:
    """The gateway's /metrics as {sample name with labels: value}."""
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{gateway.metrics_port}/metrics",
                                  timeout=5).read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line.startswith("maas_mqtt_gateway_")}


def test_the_gateway_counts_logins_connections_and_messages_for_prometheus(gateway, space):
    add(space, "ticks", "multicast", "standard-small-multicast")
    user(space)
    sync(space)
    before = gateway_figures(gateway)
    refused = Client(gateway, space, password="wrong")
    assert refused.connected() == 134  # paho's MQTT 5 code for CONNACK 4
    sub, pub = Client(gateway, space), Client(gateway, space)
    assert sub.connected() == 0 and pub.connected() == 0
    assert sub.subscribe("ticks", qos=1) == [1]
    pub.publish("ticks", b"tick", qos=1)
    assert [m.payload for m in sub.received(1)] == [b"tick"]
    during = gateway_figures(gateway)
    sub.close()
    pub.close()

    def delta(name):
        return during.get(name, 0) - before.get(name, 0)

    assert delta('maas_mqtt_gateway_connects_total{result="accepted"}') == 2
    assert delta('maas_mqtt_gateway_connects_total{result="bad_login"}') == 1
    assert delta("maas_mqtt_gateway_connections") == 2
    assert delta('maas_mqtt_gateway_messages_total{direction="in"}') == 1
    assert delta('maas_mqtt_gateway_messages_total{direction="out"}') == 1


def test_a_brokered_space_s_user_gets_connack_5(gateway, tenant):
    """The gateway serves standard spaces: a brokered space's user logs in to the auth service
    but has no policy on the router, which refuses the connection: CONNACK 5, not 0."""
    brokered = services.create_address_space(ctx=CTX, tenant=tenant, name="brk", type="brokered",
                                             plan="brokered-single-broker")
    user(brokered)
    client = Client(gateway, brokered)
    assert client.connected() == 135  # paho's MQTT 5 code for CONNACK 5 (not authorized)
    assert client.disconnected.wait(5)


def test_a_message_over_the_space_s_largest_is_refused_and_its_client_disconnected(
        gateway, space, settings):
    settings.MAAS_ROUTER_POLICY = {**settings.MAAS_ROUTER_POLICY, "maxMessageSize": 1024}
    add(space, "events", "multicast", "standard-small-multicast")
    user(space)
    sync(space)
    sub, pub = Client(gateway, space), Client(gateway, space)
    assert sub.subscribe("events", qos=1) == [1]
    pub.publish("events", b"s" * 200, qos=1)
    assert sub.received(1)[0].payload == b"s" * 200
    pub.client.publish("events", b"L" * 4096, qos=1)
    assert pub.disconnected.wait(10)
    pub2 = Client(gateway, space)
    pub2.publish("events", b"after", qos=1)
    assert [m.payload for m in sub.received(2)] == [b"s" * 200, b"after"]  # never the large one
    sub.close()
    pub2.close()


def test_a_space_whose_router_configuration_is_being_restored_gets_connack_3_and_goes_first(
        gateway, space):
    """After a router restart without its configuration, the watch marks the spaces it must
    restore; until a space is back its clients are refused as a transient failure (the auth
    service's sasl sys-temp: CONNACK 3, server unavailable, which clients retry), never let in
    to hang, and the spaces clients wait for are restored first."""
    from config_service.models import AgentState
    from workers import dispatch
    from workers.agents import runner
    from workers.agents.router import watch as router_watch

    add(space, "events", "multicast", "standard-small-multicast")
    user(space)
    sync(space)
    assert Client(gateway, space).connected() == 0
    runner.invalidate("router", AgentState.objects.filter(kind="router", space_uid=space.uid),
                      router_watch.RESTORING)  # what the watch does for a router back empty

    def refused_and_asked() -> bool:  # the auth service reads what is restoring every second
        client = Client(gateway, space)
        code = client.connected()
        client.close()
        asked = dispatch._redis().zscore(router_watch.WANTED_KEY, space.vhost) is not None
        return code == 136 and asked  # paho's MQTT 5 code for CONNACK 3 (server unavailable)

    wait_for(refused_and_asked, 10, interval=0.3, what="CONNACK 3, the space asked first")
    assert router_watch.restore() == (1, 0)
    assert dispatch._redis().zscore(router_watch.WANTED_KEY, space.vhost) is None

    def accepted() -> bool:
        client = Client(gateway, space)
        code = client.connected()
        client.close()
        return code == 0

    wait_for(accepted, 10, interval=0.3, what="CONNACK 0 once restored")


def test_the_space_s_connections_name_each_mqtt_client_and_a_close_disconnects_it(
        gateway, space, tenant, clients):
    add(space, "events", "multicast", "standard-small-multicast")
    user(space)
    sync(space)
    client = Client(gateway, space, client_id="sensor-17")
    assert client.connected() == 0
    assert client.subscribe("events", qos=1) == [1]
    url = f"/api/v1/tenants/{tenant.slug}/addressspaces/{space.name}/connections/"
    (conn,) = clients["viewer"].get(url, {"via": "gateway"}).json()["items"]
    assert conn["spec"]["containerId"] == "sensor-17" and conn["spec"]["protocol"] == "mqtt"
    assert conn["spec"]["principal"] == "app" and conn["metrics"]["receivers"] == 1
    # the MQTT client's own address, not the gateway's
    port = client.client.socket().getsockname()[1]
    assert conn["spec"]["hostname"] == f"127.0.0.1:{port}"
    links = clients["viewer"].get(f"{url}{conn['metadata']['name']}/").json()["links"]
    assert [(link["role"], link["address"]) for link in links] == [("receiver", "events")]

    assert clients["admin"].delete(f"{url}{conn['metadata']['name']}/").status_code == 204
    assert client.disconnected.wait(10), "the MQTT client was not disconnected"
    # paho reconnects on its own, as a new connection of the same client
    wait_for(lambda: [c["metadata"]["name"] for c in clients["viewer"].get(url).json()["items"]
                      if c["spec"]["containerId"] == "sensor-17"] not in ([], [conn["metadata"]["name"]]),
             timeout=15, what="the closed client to be back as a new connection")
    client.client.disconnect()
    client.client.loop_stop()


def test_where_the_first_router_of_a_mesh_is_gone_clients_get_the_next(router, space):
    """One machine's mesh (MAAS_ROUTER_MESH): the gateway opens a client's AMQP connection to
    the first router that answers, so MQTT clients reconnecting after their router went away
    land on another router of the mesh."""
    add(space, "events", "multicast", "standard-small-multicast")
    user(space)
    sync(space)
    gone = socket.socket()
    gone.bind(("127.0.0.1", 0))  # a port nothing listens on: a router that went away
    dead = gone.getsockname()[1]
    proc = GatewayProcess(dead, more_routers=(router.amqp_port,))
    proc.start()
    try:
        sub, pub = Client(proc, space), Client(proc, space)
        assert sub.connected() == 0 and pub.connected() == 0
        assert sub.subscribe("events", qos=1) == [1]
        pub.publish("events", b"via the next router", qos=1)
        assert [m.payload for m in sub.received(1)] == [b"via the next router"]
        sub.close()
        pub.close()
        alone = GatewayProcess(dead)  # without the mesh's other routers: unavailable
        alone.start()
        try:
            assert Client(alone, space).connected() == 136  # paho's MQTT 5 code for CONNACK 3
        finally:
            alone.stop()
    finally:
        proc.stop()
        gone.close()
