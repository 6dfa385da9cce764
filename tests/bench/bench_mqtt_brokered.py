"""MQTT throughput of a brokered space against RabbitMQ's MQTT directly (printed, not asserted).

On a brokered space the platform's MQTT endpoint is RabbitMQ's MQTT plugin itself
(RABBITMQ_MQTT_PORT); what the platform adds is the vhost, a least-privilege user with a topic
permission on `amq.topic` (checked per publish) and the binding of `amq.topic` to the topic's
exchange (storage reconciler). "direct" is the broker's default vhost `/` with the API user
(no topic permission, no binding). One paho-mqtt publisher process and one subscriber process
per run, MESSAGES of 100 bytes; rate = messages received / time from the first publish to the
last message received. Runs alternate (direct, platform) ROUNDS times; medians and their ratio.

    .venv/bin/python tests/bench/bench_mqtt_brokered.py --messages 20000 --rounds 3
"""
import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import paho.mqtt.client as paho  # noqa: E402

from tests.storage.clients import API_PASSWORD, API_URL, API_USER, MQTT_PORT  # noqa: E402
from workers.agents.storage.desired import BrokerTopic, BrokerUser, VhostState  # noqa: E402
from workers.agents.storage.rabbitmq import (  # noqa: E402
    BrokerReconciler,
    RabbitMQApi,
    broker_username,
    hash_password,
)

PASSWORD = "bench-password"


def client(username, password, client_id):
    c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id)
    c.username_pw_set(username, password)
    c.max_inflight_messages_set(100)
    c.max_queued_messages_set(0)
    c.connect("127.0.0.1", MQTT_PORT, keepalive=60)
    return c


def subscriber(login, topic, qos, n, ready, result):
    got = [0, None]
    c = client(*login, "bench-sub-" + uuid.uuid4().hex[:6])

    def on_message(cl, u, m):
        if got[0] == 0:
            got[1] = time.perf_counter()
        got[0] += 1
        if got[0] == n:
            cl.disconnect()

    c.on_message = on_message
    c.on_subscribe = lambda *a: ready.set()
    c.subscribe(topic + "/#", qos)
    start = time.perf_counter()
    c.loop_start()
    while got[0] < n and time.perf_counter() - start < 120:
        time.sleep(0.01)
    c.loop_stop()
    result.put((got[0], time.perf_counter()))


def publisher(login, topic, qos, n, started):
    c = client(*login, "bench-pub-" + uuid.uuid4().hex[:6])
    c.loop_start()
    started.put(time.perf_counter())
    body = b"x" * 100
    for i in range(n):
        info = c.publish(f"{topic}/room{i % 10}", body, qos=qos)
        if qos and i % 100 == 99:
            info.wait_for_publish(timeout=30)
    time.sleep(0.5)
    c.disconnect()
    c.loop_stop()


def run(login, topic, qos, n):
    ready, result, started = mp.Event(), mp.Queue(), mp.Queue()
    sub = mp.Process(target=subscriber, args=(login, topic, qos, n, ready, result))
    sub.start()
    ready.wait(10)
    time.sleep(0.3)
    pub = mp.Process(target=publisher, args=(login, topic, qos, n, started))
    pub.start()
    t0 = started.get(timeout=30)
    received, t1 = result.get(timeout=180)
    pub.join()
    sub.join()
    return received / (t1 - t0), received


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    api = RabbitMQApi(API_URL, API_USER, API_PASSWORD, timeout=10)
    vhost = "maas-bench-mqtt-" + uuid.uuid4().hex[:6]
    user = BrokerUser(broker_username(vhost, "app"), hash_password(PASSWORD, b"salt"),
                      send=("sensors",), recv=("sensors",))
    result = BrokerReconciler(api).apply(
        VhostState(vhost, topics=[BrokerTopic("sensors")], users=[user]))
    assert result.ok, result
    platform = (f"{vhost}:{user.username}", PASSWORD)
    direct = (API_USER, API_PASSWORD)  # default vhost "/"
    direct_topic = "maas-bench-" + uuid.uuid4().hex[:6]
    try:
        for qos in (0, 1):
            rates = {"direct": [], "platform": []}
            for _ in range(args.rounds):
                for name, login, topic in (("direct", direct, direct_topic),
                                           ("platform", platform, "sensors")):
                    rate, received = run(login, topic, qos, args.messages)
                    rates[name].append(rate)
                    if received < args.messages:
                        print(f"  qos {qos} {name}: {received}/{args.messages} received")
            d, p = (statistics.median(rates[k]) for k in ("direct", "platform"))
            print(f"MQTT QoS {qos}: direct {d:,.0f} msgs/s, platform {p:,.0f} msgs/s, "
                  f"ratio platform/direct {p / d:.2f}  (runs: {rates})")
    finally:
        BrokerReconciler(api).teardown(vhost)
        api.close()


if __name__ == "__main__":
    main()
