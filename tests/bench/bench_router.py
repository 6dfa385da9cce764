"""Benchmark of the embedded router: throughput and router CPU per 100-byte message.

Cases: anycast pre-settled, anycast unsettled, a queue through the router (waypoint +
autoLinks to RabbitMQ) and the same queue straight on RabbitMQ. Several client processes
so the Python clients are not the only bottleneck. Prints figures; asserts nothing.

    .venv/bin/python tests/bench/bench_router.py [--count 20000] [--clients 2]
"""

import argparse
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import requests
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import AtMostOnce, Container
from proton.utils import BlockingConnection

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from workers.router.passwords import hash_password  # noqa: E402

RABBIT_API = "http://127.0.0.1:15672/api"
GUEST = ("guest", "guest")
ADMIN_PASSWORD = "bench-admin"
PAYLOAD = Message(body=b"x" * 100).encode()
CLK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def rabbit_pid() -> int | None:
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().strip() == "beam.smp":
                        return int(pid)
            except OSError:
                continue
    return None


class Sender(MessagingHandler):
    def __init__(self, target, count, presettled):
        super().__init__(prefetch=0, auto_settle=True)
        self.target, self.count, self.presettled = target, count, presettled
        self.sent = self.settled = 0

    def on_start(self, event):
        url, kwargs, address = self.target
        conn = event.container.connect(url, **kwargs)
        event.container.create_sender(conn, address,
                                      options=AtMostOnce() if self.presettled else None)

    def on_sendable(self, event):
        sender = event.sender
        while sender.credit and self.sent < self.count:
            delivery = sender.delivery(b"%d" % self.sent)
            sender.stream(PAYLOAD)
            sender.advance()
            if self.presettled:
                delivery.settle()
            self.sent += 1
        if self.presettled and self.sent == self.count:
            event.connection.close()

    def on_settled(self, event):
        self.settled += 1
        if self.settled == self.count:
            event.connection.close()


class Receiver(MessagingHandler):
    def __init__(self, target, total, stop):
        super().__init__(prefetch=500, auto_accept=False)
        self.target, self.total, self.stop = target, total, stop
        self.local = 0

    def on_start(self, event):
        url, kwargs, address = self.target
        self.conn = event.container.connect(url, **kwargs)
        event.container.create_receiver(self.conn, address)
        event.container.schedule(0.1, self)

    def on_timer_task(self, event):
        with self.total.get_lock():
            self.total.value += self.local
        self.local = 0
        if self.stop.is_set():
            self.conn.close()
        else:
            event.container.schedule(0.1, self)

    def on_delivery(self, event):
        delivery = event.delivery
        if delivery.partial:
            return
        event.link.recv(delivery.pending)
        event.link.advance()
        if not delivery.settled:
            delivery.update(delivery.ACCEPTED)
        delivery.settle()
        self.local += 1


def run_sender(target, count, presettled):
    Container(Sender(target, count, presettled)).run()


def run_receiver(target, total, stop):
    Container(Receiver(target, total, stop)).run()


def run_case(name, send_target, recv_target, count, clients, presettled, pids):
    total, stop = mp.Value("q", 0), mp.Event()
    receivers = [mp.Process(target=run_receiver, args=(recv_target, total, stop))
                 for _ in range(clients)]
    for p in receivers:
        p.start()
    time.sleep(1.0)  # let receivers attach and grant credit
    cpu0 = {k: cpu_seconds(pid) for k, pid in pids.items()}
    t0 = time.monotonic()
    senders = [mp.Process(target=run_sender, args=(send_target, count // clients, presettled))
               for _ in range(clients)]
    for p in senders:
        p.start()
    expected = (count // clients) * clients
    deadline = t0 + 60
    while total.value < expected and time.monotonic() < deadline:
        if presettled and all(not p.is_alive() for p in senders) and time.monotonic() > \
                max(t0 + 2, deadline - 55):
            # pre-settled messages may be dropped; stop when the flow has dried up
            before = total.value
            time.sleep(0.5)
            if total.value == before:
                break
        time.sleep(0.05)
    elapsed = time.monotonic() - t0
    cpu = {k: cpu_seconds(pid) - cpu0[k] for k, pid in pids.items()}
    stop.set()
    for p in senders + receivers:
        p.join(10)
        if p.is_alive():
            p.terminate()
    got = total.value
    figures = {"msgs": got, "rate": got / elapsed if elapsed else 0.0}
    for k, seconds in cpu.items():
        figures[f"{k}_us_per_msg"] = seconds / max(got, 1) * 1e6
    extra = "  ".join(f"{k.split('_')[0]} CPU {v:.0f} us/msg" for k, v in figures.items()
                      if k.endswith("us_per_msg"))
    print(f"{name:<28} {got:>7} msgs {figures['rate']:>9.0f} msgs/s  {extra}", flush=True)
    return figures


def mgmt_request(port, operation, body=None, **props):
    conn = BlockingConnection(f"amqp://127.0.0.1:{port}", user="admin",
                              password=ADMIN_PASSWORD, allowed_mechs="PLAIN",
                              allow_insecure_mechs=True, timeout=10)
    try:
        receiver = conn.create_receiver(None, dynamic=True)
        sender = conn.create_sender("$management")
        props["operation"] = operation
        sender.send(Message(body=body, properties=props,
                            reply_to=receiver.remote_source.address))
        reply = receiver.receive(10)
        return reply.properties["statusCode"], reply.body
    finally:
        conn.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--clients", type=int, default=2)
    args = parser.parse_args()

    amqp_port, mgmt_port = free_port(), free_port()
    env = dict(os.environ, MAAS_ROUTER_ADMIN_PASSWORD=ADMIN_PASSWORD, PYTHONPATH=str(ROOT))
    router = subprocess.Popen([sys.executable, "-m", "workers.router", "--amqp-port",
                               str(amqp_port), "--management-port", str(mgmt_port),
                               "--log-level", "WARNING"], cwd=ROOT, env=env)
    vhost = f"maas-bench-{uuid.uuid4().hex[:8]}"
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", mgmt_port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        requests.put(f"{RABBIT_API}/vhosts/{vhost}", auth=GUEST, timeout=60).raise_for_status()
        requests.put(f"{RABBIT_API}/permissions/{vhost}/guest",
                     json={"configure": ".*", "write": ".*", "read": ".*"}, auth=GUEST,
                     timeout=60).raise_for_status()
        for queue in ("bq", "dq"):
            requests.put(f"{RABBIT_API}/queues/{vhost}/{queue}", json={"durable": True},
                         auth=GUEST, timeout=60).raise_for_status()
        config = [
            ("io.maas.router.user", "u", {"vhost": "b", "username": "bench",
                                           "passwordHash": hash_password("bench")}),
            ("org.apache.qpid.dispatch.vhost", "b", {"hostname": "b", "groups": {
                "all": {"users": "bench", "sources": "*", "targets": "*"}}}),
            ("org.apache.qpid.dispatch.router.config.address", "any", {"prefix": "b/any"}),
            ("org.apache.qpid.dispatch.router.config.address", "bq",
             {"prefix": "b/bq", "waypoint": True}),
            ("org.apache.qpid.dispatch.connector", "broker",
             {"host": "127.0.0.1", "port": "5672", "saslUsername": "guest",
              "saslPassword": "guest", "virtualHost": f"vhost:{vhost}"}),
            ("org.apache.qpid.dispatch.router.config.autoLink", "bq-in",
             {"address": "b/bq", "direction": "in", "connection": "broker",
              "externalAddress": "/amq/queue/bq"}),
            ("org.apache.qpid.dispatch.router.config.autoLink", "bq-out",
             {"address": "b/bq", "direction": "out", "connection": "broker",
              "externalAddress": "/amq/queue/bq"}),
        ]
        for etype, name, attrs in config:
            status, body = mgmt_request(mgmt_port, "CREATE", attrs, type=etype, name=name)
            assert status == 201, body
        time.sleep(1.0)  # autoLinks attach

        url = f"amqp://127.0.0.1:{amqp_port}"
        client = {"user": "bench", "password": "bench", "allowed_mechs": "PLAIN",
                  "allow_insecure_mechs": True, "virtual_host": "b"}
        rabbit = {"user": "guest", "password": "guest", "allowed_mechs": "PLAIN",
                  "allow_insecure_mechs": True, "virtual_host": f"vhost:{vhost}"}
        pids = {"router": router.pid}
        beam = rabbit_pid()
        if beam:
            pids["rabbit"] = beam
        print(f"{args.count} x 100-byte messages, {args.clients} sender and "
              f"{args.clients} receiver processes, {os.cpu_count()} CPUs")
        any_t = (url, client, "any")
        run_case("anycast pre-settled", any_t, any_t, args.count, args.clients, True, pids)
        unsettled = run_case("anycast unsettled", any_t, any_t, args.count, args.clients,
                             False, pids)
        q_t = (url, client, "bq")
        routed = run_case("queue via router", q_t, q_t, args.count, args.clients, False, pids)
        d_t = ("amqp://127.0.0.1:5672", rabbit, "/amq/queue/dq")
        direct = run_case("queue direct to RabbitMQ", d_t, d_t, args.count, args.clients,
                          False, pids)
        if direct["rate"]:
            print(f"queue via router / direct throughput ratio: "
                  f"{routed['rate'] / direct['rate']:.2f}")
        print(f"anycast unsettled router CPU: {unsettled['router_us_per_msg']:.0f} us/msg")
    finally:
        router.terminate()
        router.wait(10)
        requests.delete(f"{RABBIT_API}/vhosts/{vhost}", auth=GUEST, timeout=60)


if __name__ == "__main__":
    main()
