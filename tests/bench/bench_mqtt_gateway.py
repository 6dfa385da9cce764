"""MQTT throughput through the gateway of standard spaces, beside Mosquitto (printed, not
asserted).

Sets up what `make run` would: a database of its own (`--database`, created and migrated if
missing; dropped at the end if the run created it, unless `--keep`), the auth service (in this
process, reading that database), an embedded router on free ports and the gateway process
(`manage.py run_mqtt_gateway`); a standard space with a multicast address `events`, a topic
`sensors` and an anycast address `rpc`, and a messaging user, through the service functions,
reconciled by the real agents (RabbitMQ holds the topic). One paho-mqtt publisher process and
one subscriber process per run, MESSAGES of 100 bytes, publisher in-flight window 100; rate =
messages received / time from the first publish to the last message received. Cases, each at
QoS 0 and QoS 1:

- mosquitto: paho -> Mosquitto (1883) -> paho, the reference of the same run;
- amqtt (with `--amqtt-port`): the same through an amqtt broker started beforehand (the
  library the gateway did not use: docs/mqtt.md);
- gateway multicast: paho -> gateway -> router (`events`) -> gateway -> paho;
- gateway multicast (TLS to router): the same with the gateway on the router's AMQPS listener,
  as `make run` has it (MAAS_MQTT_GATEWAY_ROUTER_TLS);
- gateway topic: the same through RabbitMQ (`sensors/room<i>`, subscriber `sensors/#`);
- gateway mqtt->amqp: paho -> gateway -> router (`rpc`) -> a proton receiver (credit 500,
  accepting each message).

Runs alternate the cases ROUNDS times; medians, and each gateway case's ratio to Mosquitto.

    .venv/bin/python tests/bench/bench_mqtt_gateway.py --messages 20000 --rounds 3
"""
import argparse
import base64
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import paho.mqtt.client as paho  # noqa: E402

from tests.bench.common import KEEP_HELP, Leftovers  # noqa: E402
from tests.router.conftest import (  # noqa: E402
    ADMIN_PASSWORD,
    RouterProcess,
    free_port,
    terminate,
    wait_port,  # noqa: E402
)
from workers.agents.router.certificates import ensure_self_signed  # noqa: E402

PASSWORD = "bench-password"
MOSQUITTO_PORT = 1883
TIMEOUT = 120.0


def client(port, login, client_id):
    c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id,
                    protocol=paho.MQTTv311)
    if login:
        c.username_pw_set(login, PASSWORD)
    c.max_inflight_messages_set(100)
    c.max_queued_messages_set(0)
    c.connect("127.0.0.1", port, keepalive=60)
    return c


def mqtt_subscriber(port, login, topic_filter, qos, n, ready, result):
    got = [0]
    c = client(port, login, "bench-sub-" + uuid.uuid4().hex[:6])

    def on_message(cl, u, m):
        got[0] += 1

    c.on_message = on_message
    c.on_subscribe = lambda *a: ready.set()
    c.subscribe(topic_filter, qos)
    c.loop_start()
    _wait(got, n)
    result.put((got[0], time.perf_counter()))
    c.disconnect()
    c.loop_stop()


def amqp_subscriber(amqp_port, login, vhost, address, n, ready, result):
    from proton import Timeout
    from proton.utils import BlockingConnection

    conn = BlockingConnection(f"amqp://127.0.0.1:{amqp_port}", user=login, password=PASSWORD,
                              allowed_mechs="PLAIN", allow_insecure_mechs=True,
                              virtual_host=vhost, timeout=30)
    receiver = conn.create_receiver(address, credit=500)
    ready.set()
    got, deadline, last = 0, time.monotonic() + TIMEOUT, time.perf_counter()
    while got < n and time.monotonic() < deadline:
        try:
            receiver.receive(5)
        except Timeout:
            break
        if receiver.fetcher.unsettled:  # QoS 0 arrives pre-settled
            receiver.accept()
        got += 1
        last = time.perf_counter()
    result.put((got, last))
    conn.close()


def _wait(got, n):
    start, seen, idle_since = time.monotonic(), -1, time.monotonic()
    while got[0] < n and time.monotonic() - start < TIMEOUT:
        if got[0] != seen:
            seen, idle_since = got[0], time.monotonic()
        elif time.monotonic() - idle_since > 5:
            break  # nothing for 5 s: some were lost
        time.sleep(0.005)


def publisher(port, login, topics, qos, n, started):
    c = client(port, login, "bench-pub-" + uuid.uuid4().hex[:6])
    c.loop_start()
    started.put(time.perf_counter())
    body = b"x" * 100
    for i in range(n):
        info = c.publish(topics[i % len(topics)], body, qos=qos)
        if qos and i % 100 == 99:
            info.wait_for_publish(timeout=30)
    time.sleep(0.5)
    c.disconnect()
    c.loop_stop()


def run(case, qos, n):
    ready, result, started = mp.Event(), mp.Queue(), mp.Queue()
    port, login, topics, sub_target, sub_args = case
    sub = mp.Process(target=sub_target, args=(*sub_args, n, ready, result) if
                     sub_target is amqp_subscriber else (*sub_args, qos, n, ready, result))
    sub.start()
    ready.wait(30)
    time.sleep(0.5)  # the subscriber's receivers are bound (RabbitMQ binds after the attach)
    pub = mp.Process(target=publisher, args=(port, login, topics, qos, n, started))
    pub.start()
    t0 = started.get(timeout=30)
    received, t1 = result.get(timeout=TIMEOUT + 30)
    pub.join()
    sub.join()
    return received / (t1 - t0), received


def setup_space(router):
    from django.contrib.auth import get_user_model

    from config_service import services
    from core.context import Context
    from tenants.default_plans import install
    from tenants.models import AddressPlan, AddressSpacePlan
    from tenants.services import create_tenant
    from workers.agents import runner

    install(AddressPlan, AddressSpacePlan)
    ctx = Context(actor="bench")
    owner = get_user_model().objects.create_user(username=f"bench-{uuid.uuid4().hex[:6]}")
    tenant = create_tenant(ctx=ctx, slug=f"bench-{uuid.uuid4().hex[:6]}", owner=owner)
    space = services.create_address_space(ctx=ctx, tenant=tenant, name="iot", type="standard",
                                          plan="standard-medium")
    for address, kind in (("events", "multicast"), ("sensors", "topic"), ("rpc", "anycast")):
        services.create_address(ctx=ctx, space=space, address=address, type=kind,
                                plan=f"standard-small-{kind}")


    services.create_messaging_user(
        ctx=ctx, space=space, username="bench",
        authentication={"type": "password",
                        "password": base64.b64encode(PASSWORD.encode()).decode()},
        authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
    for kind in ("storage", "router"):
        runner.run(space.uid, kind)
    return space


def teardown_space(space):
    from config_service import services
    from core.context import Context
    from workers.agents import runner

    services.delete_address_space(ctx=Context(actor="bench"), space=space)
    for kind in ("storage", "router"):
        runner.run(space.uid, kind)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database", default="maas_bench_mqtt_gateway")
    parser.add_argument("--keep", action="store_true", help=KEEP_HELP)
    parser.add_argument("--amqtt-port", type=int, default=0,
                        help="also measure an amqtt broker already listening there (anonymous)")
    args = parser.parse_args()
    leftovers = Leftovers()
    url = leftovers.ensure_database(args.database)
    # The router's AMQPS listener, which make run's gateway logs in on (--router-ca): the
    # `gateway ... (TLS to router)` cases; the others go to its plain listener.
    tls_dir = tempfile.mkdtemp(prefix="bench-gateway-tls-")
    cert, key = f"{tls_dir}/cert.pem", f"{tls_dir}/key.pem"
    ensure_self_signed(cert, key, "127.0.0.1")
    router = RouterProcess(auth_port=0, extra_args=["--tls-cert", cert, "--tls-key", key])
    os.environ.update({
        "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "maas.settings",
        "MAAS_ROUTER_MANAGEMENT_URL": f"amqp://127.0.0.1:{router.mgmt_port}",
        "MAAS_ROUTER_ADMIN_USER": "admin", "MAAS_ROUTER_ADMIN_PASSWORD": ADMIN_PASSWORD,
        "MAAS_ROUTER_AMQP_PORT": str(router.amqp_port), "MAAS_LOG_LEVEL": "WARNING"})
    import django

    django.setup()
    from tests.qdrouterd import AuthService

    auth = AuthService()  # reads the bench database
    router.auth_port = auth.port
    router.start()
    space = setup_space(router)
    gateways = []  # stopped at the end, whatever happens from here on

    def start_gateway(router_port: int, *options: str) -> int:
        port = free_port()
        gateways.append(subprocess.Popen(
            [sys.executable, "manage.py", "run_mqtt_gateway", "--port", str(port),
             "--tls-port", "0", "--router", f"127.0.0.1:{router_port}", *options,
             "--metrics-port", "0", "--log-level", "WARNING"],
            cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT)))
        wait_port(port)
        return port

    try:
        gw_port = start_gateway(router.amqp_port)
        tls_gw_port = start_gateway(router.amqps_port, "--router-ca", cert)
        measure(args, router, space, gw_port, tls_gw_port)
    finally:
        for gateway in gateways:
            terminate(gateway)
        shutil.rmtree(tls_dir, ignore_errors=True)
        teardown_space(space)
        router.stop()
        auth.stop()
        leftovers.clean_up(keep=args.keep)


def measure(args, router, space, gw_port: int, tls_gw_port: int) -> None:
    """Every case, QoS 0 then 1, ROUNDS times; prints the medians."""
    login = f"bench@{space.vhost}"
    rooms = [f"sensors/room{i}" for i in range(10)]
    cases = {
        "mosquitto": (MOSQUITTO_PORT, None, ["bench/x"], mqtt_subscriber,
                      (MOSQUITTO_PORT, None, "bench/#")),
        **({"amqtt": (args.amqtt_port, None, ["bench/x"], mqtt_subscriber,
                      (args.amqtt_port, None, "bench/#"))} if args.amqtt_port else {}),
        "gateway multicast": (gw_port, login, ["events"], mqtt_subscriber,
                              (gw_port, login, "events")),
        "gateway multicast (TLS to router)": (tls_gw_port, login, ["events"], mqtt_subscriber,
                                              (tls_gw_port, login, "events")),
        "gateway topic": (gw_port, login, rooms, mqtt_subscriber, (gw_port, login, "sensors/#")),
        "gateway mqtt->amqp": (gw_port, login, ["rpc"], amqp_subscriber,
                               (router.amqp_port, login, space.vhost, "rpc")),
    }
    for qos in (0, 1):
        rates = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, case in cases.items():
                rate, received = run(case, qos, args.messages)
                rates[name].append(rate)
                if received < args.messages:
                    print(f"  QoS {qos} {name}: {received}/{args.messages} received")
        ref = statistics.median(rates["mosquitto"])
        print(f"MQTT QoS {qos}, {args.messages} x 100 bytes, medians of {args.rounds}:")
        for name, values in rates.items():
            median = statistics.median(values)
            print(f"  {name:36s} {median:8,.0f} msgs/s   ratio to mosquitto "
                  f"{median / ref:.2f}   (runs: {[round(v) for v in values]})")


if __name__ == "__main__":
    main()
