"""Benchmark of the routers: throughput and router CPU per 100-byte message, for the embedded
router and, when `QDROUTERD` names a qdrouterd 1.19 build, for qdrouterd and for a mesh of two
qdrouterd interior routers (mutual TLS between them, as `runplatform` meshes them; senders on
one, receivers on the other, the CPU of both routers per message) in the same run; and
`embedded-tls`, a second embedded router whose connector reaches RabbitMQ's TLS listener as
`make run`'s does (where deploy/local/services.sh made the internal CA).

Cases: anycast pre-settled, anycast unsettled, a queue through the router (waypoint +
autoLinks to RabbitMQ) and the same queue straight on RabbitMQ. Each router gets over
management what the router agent would write for a space (workers/agents/router/desired.py):
a vhost policy naming `bench@<vhost>`, addresses qualified `<vhost>/...`, a connector to the
space's broker vhost. qdrouterd is configured by the project (dataplane/qdrouterd.py): SASL goes
to the MaaS auth service, run in a thread here with a verifier for the bench's own logins, and
its connector reaches RabbitMQ through the vhost relay. Several client processes; rounds that
alternate the routers; prints every run, then the medians per case and router with the
qdrouterd/embedded ratios. Asserts nothing.

    QDROUTERD=/opt/qdr/bin/qdrouterd .venv/bin/python tests/bench/bench_router.py \
        [--count 20000] [--clients 2] [--rounds 3]
"""

import argparse
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import requests
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import AtMostOnce, Container

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dataplane import qdrouterd  # noqa: E402
from dataplane.authservice.server import AuthServer, Identity, Verifier  # noqa: E402
from tests.bench.common import cpu_seconds  # noqa: E402
from workers.clients.qdr import Management  # noqa: E402

RABBIT_API = "http://127.0.0.1:15672/api"
AMQPS_PORT = 5671  # its TLS listener (deploy/local/services.sh)
INTERNAL_CA = ROOT / "var" / "internal-tls" / "ca.pem"  # what signed it
GUEST = ("guest", "guest")
ADMIN, ADMIN_PASSWORD = "admin", "bench-admin"
# The bench's messaging user (on the routers) and the routers' login on the broker vhost.
USER, PASSWORD = "bench", "bench"
BROKER_PASSWORD = "bench-broker"
PAYLOAD = Message(body=b"x" * 100).encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def tls(kwargs: dict) -> dict:
    """Connection options, a `ca` (file) made into an SSL domain that verifies the chain and
    the host name (a domain cannot cross to the client processes itself)."""
    if "ca" not in kwargs:
        return kwargs
    from proton import SSLDomain

    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(kwargs["ca"])
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    return {**{k: v for k, v in kwargs.items() if k != "ca"}, "ssl_domain": domain}


class Sender(MessagingHandler):
    def __init__(self, target, count, presettled):
        super().__init__(prefetch=0, auto_settle=True)
        self.target, self.count, self.presettled = target, count, presettled
        self.sent = self.settled = 0

    def on_start(self, event):
        url, kwargs, address = self.target
        conn = event.container.connect(url, **tls(kwargs))
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
        self.conn = event.container.connect(url, **tls(kwargs))
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
    cpu0 = {k: cpu_of(pid) for k, pid in pids.items()}
    t0 = time.monotonic()
    senders = [mp.Process(target=run_sender, args=(send_target, count // clients, presettled))
               for _ in range(clients)]
    for p in senders:
        p.start()
    expected = (count // clients) * clients
    deadline = t0 + 60
    seen, last_progress, end = 0, t0, None
    while total.value < expected and time.monotonic() < deadline:
        now, value = time.monotonic(), total.value
        if value != seen:
            seen, last_progress = value, now
        elif presettled and now - last_progress > 0.5 and not any(p.is_alive() for p in senders):
            # Pre-settled messages may be dropped (qdrouterd drops what a receiver that falls
            # behind cannot take): the flow has dried up, and ended at its last progress.
            end = last_progress
            break
        time.sleep(0.05)
    elapsed = (end or time.monotonic()) - t0
    cpu = {k: cpu_of(pid) - cpu0[k] for k, pid in pids.items()}
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
    print(f"{name:<40} {got:>7} msgs {figures['rate']:>9.0f} msgs/s  {extra}", flush=True)
    return figures


def cpu_of(pids) -> float:
    """CPU seconds of a process, or of several together (both routers of a mesh)."""
    return sum(cpu_seconds(pid) for pid in (pids if isinstance(pids, tuple) else (pids,)))


def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} does not listen on {port}")


@dataclass
class Router:
    """A router under test: `embedded` or `qdrouterd`, its process and ports."""

    kind: str
    proc: subprocess.Popen
    amqp_port: int
    mgmt_port: int
    log: Path | None = None
    peer: "Router | None" = None  # a mesh: the router the receivers are on

    def management(self) -> Management:
        return Management(f"amqp://127.0.0.1:{self.mgmt_port}", ADMIN, ADMIN_PASSWORD)

    def stop(self) -> None:
        if self.peer is not None:
            self.peer.stop()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def internal_ca() -> str:
    return str(INTERNAL_CA) if INTERNAL_CA.exists() else ""


def start_embedded(auth_port: int, broker_ca: str | None = None) -> Router:
    """The embedded router; `broker_ca`: its connector reaches RabbitMQ's TLS listener, the
    certificate checked against this CA (kind `embedded-tls`)."""
    amqp_port, mgmt_port = free_port(), free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    tls = ["--broker-ca", broker_ca] if broker_ca else []
    proc = subprocess.Popen([sys.executable, "-m", "dataplane.router", "--amqp-port",
                             str(amqp_port), "--management-port", str(mgmt_port),
                             "--admin-user", ADMIN, "--auth-service", f"127.0.0.1:{auth_port}",
                             "--log-level", "WARNING", *tls], cwd=ROOT, env=env)
    wait_port(mgmt_port, proc, "the embedded router")
    return Router("embedded-tls" if broker_ca else "embedded", proc, amqp_port, mgmt_port)


def start_qdrouterd(auth_port: int, workdir: Path, name: str = "qdrouterd",
                    mesh: dict | None = None) -> Router:
    """qdrouterd with the project's static configuration, as `runplatform` writes it;
    `mesh`: its Listeners settings as a router of a mesh (interior, inter-router TLS)."""
    amqp_port, mgmt_port = free_port(), free_port()
    where = qdrouterd.Listeners(
        host="127.0.0.1", amqp_port=amqp_port, management_host="127.0.0.1",
        management_port=mgmt_port, admin_user=ADMIN, auth_host="127.0.0.1",
        auth_port=auth_port, **(mesh or {}))
    path = qdrouterd.write_config(workdir / f"{name}.json", f"maas-{name}", where)
    log = workdir / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(qdrouterd.command(path), stdout=out, stderr=subprocess.STDOUT)
    wait_port(amqp_port, proc, f"qdrouterd (log: {log})")
    wait_port(mgmt_port, proc, f"qdrouterd (log: {log})")
    return Router("qdrouterd", proc, amqp_port, mgmt_port, log)


def start_mesh(auth_port: int, workdir: Path) -> Router:
    """Two qdrouterd interior routers, the second connected to the first over mutual TLS with
    certificates of a CA of their own (workers/agents/router/certificates.py), as runplatform
    meshes MAAS_ROUTER_MESH routers; returns the first, its `peer` the second, once each sees
    the other."""
    from workers.agents.router.certificates import ensure_internal_certificates

    ids = ["maas-mesh-1", "maas-mesh-2"]
    certs = ensure_internal_certificates(str(workdir / "mesh-tls"), ids)
    port = free_port()
    first = start_qdrouterd(auth_port, workdir, "mesh-1", {
        "mode": "interior", "inter_router_port": port,
        "mesh_tls": qdrouterd.MeshTls(*certs[ids[0]])})
    second = start_qdrouterd(auth_port, workdir, "mesh-2", {
        "mode": "interior", "peers": (("127.0.0.1", port),),
        "mesh_tls": qdrouterd.MeshTls(*certs[ids[1]])})
    first.kind, first.peer = "mesh", second
    deadline = time.monotonic() + 30
    for router in (first, second):
        mgmt = router.management()
        try:
            while len(mgmt.query("org.apache.qpid.dispatch.router.node", ["id"])) < 2:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the mesh did not form (logs in {workdir})")
                time.sleep(0.1)
        finally:
            mgmt.close()
    return first


def bench_verifier(vhost: str) -> Verifier:
    """The auth service's verifier for the bench's own logins, no database: the router admin,
    and the bench user (bare or `bench@<vhost>`) as the identity a space's policy names."""
    user = Identity(sub=f"{USER}@{vhost}", preferred_username=USER)
    identities = {(ADMIN, ADMIN_PASSWORD): Identity(sub=ADMIN, preferred_username=ADMIN),
                  (USER, PASSWORD): user, (f"{USER}@{vhost}", PASSWORD): user}
    return lambda login, password: identities.get((login, password))


def space_entities(router: Router, vhost: str, broker_port: int, queue: str) -> list:
    """What the router agent writes for a space with the anycast address `any` and the queue
    `bq` (workers/agents/router/desired.py), on this kind of router: the connector's
    `virtualHost` is the embedded router's extension; qdrouterd's connector goes to the vhost
    relay, which picks the broker vhost from the login. Both relay SASL to the auth service."""
    owner = f"maas:{vhost}:"
    connector = {"host": "127.0.0.1", "port": str(broker_port), "role": "route-container",
                 "saslUsername": f"{USER}@{vhost}", "saslPassword": BROKER_PASSWORD}
    entities = []
    if router.kind.startswith("embedded"):
        connector["virtualHost"] = f"vhost:{vhost}"
    if router.kind == "embedded-tls":
        connector["sslProfile"] = "broker"
    autolink = {"address": f"{vhost}/bq", "connection": f"{owner}broker",
                "externalAddress": f"/amq/queue/{queue}"}
    return entities + [
        ("org.apache.qpid.dispatch.vhost", f"{owner}vhost", {"hostname": vhost, "groups": {
            f"user-{USER}": {"users": f"{USER}@{vhost}", "remoteHosts": "*",
                             "sources": "*", "targets": "*"}}}),
        ("org.apache.qpid.dispatch.router.config.address", f"{owner}address:any",
         {"prefix": f"{vhost}/any", "distribution": "balanced", "waypoint": False}),
        ("org.apache.qpid.dispatch.router.config.address", f"{owner}address:bq",
         {"prefix": f"{vhost}/bq", "distribution": "balanced", "waypoint": True}),
        ("org.apache.qpid.dispatch.connector", f"{owner}broker", connector),
        ("org.apache.qpid.dispatch.router.config.autoLink", f"{owner}autolink:bq:in",
         {**autolink, "direction": "in"}),
        ("org.apache.qpid.dispatch.router.config.autoLink", f"{owner}autolink:bq:out",
         {**autolink, "direction": "out"}),
    ]


def configure(router: Router, entities: list) -> None:
    """Creates the entities, then waits until the autoLinks are attached to the broker."""
    mgmt = router.management()
    try:
        for etype, name, attrs in entities:
            mgmt.create(etype, name, attrs)
        deadline = time.monotonic() + 30
        while True:
            rows = mgmt.query("org.apache.qpid.dispatch.router.config.autoLink",
                              ["name", "operStatus"])
            if rows and all(r["operStatus"] == "active" for r in rows):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{router.kind}: autoLinks not active: {rows} "
                                   f"(log: {router.log})")
            time.sleep(0.2)
    finally:
        mgmt.close()


def rabbit(method: str, path: str, body=None) -> None:
    requests.request(method, f"{RABBIT_API}{path}", json=body, auth=GUEST,
                     timeout=60).raise_for_status()


def median_row(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def print_table(medians: dict, rounds: int) -> None:
    """One row per case and router; on qdrouterd's rows its ratios to the embedded router."""
    def us(row, key):
        return f"{row[key]:.1f}" if key in row else "-"

    print(f"\nmedians of {rounds} round(s)")
    print(f"{'case':<28} {'router':<12} {'received':>8} {'msgs/s':>8} {'router us/msg':>14} "
          f"{'RabbitMQ us/msg':>16} {'relay us/msg':>13} {'qdr/emb msgs/s':>15} "
          f"{'qdr/emb CPU':>12}")
    for (case, kind), row in medians.items():
        ratios = ""
        embedded = medians.get((case, "embedded"))
        if kind != "embedded" and embedded:
            ratios = (f"{row['rate'] / embedded['rate']:>15.2f} "
                      f"{row['router_us_per_msg'] / embedded['router_us_per_msg']:>12.2f}")
        print(f"{case:<28} {kind:<12} {row['msgs']:>8.0f} {row['rate']:>8.0f} "
              f"{us(row, 'router_us_per_msg'):>14} "
              f"{us(row, 'rabbit_us_per_msg'):>16} {us(row, 'relay_us_per_msg'):>13} "
              f"{ratios}".rstrip())
    for case in {case for case, _ in medians}:
        one, mesh = medians.get((case, "qdrouterd")), medians.get((case, "mesh"))
        if one and mesh and one["rate"]:
            print(f"{case}: mesh (sender and receiver on two routers) / one qdrouterd: "
                  f"{mesh['rate'] / one['rate']:.2f} x msgs/s, "
                  f"{mesh['router_us_per_msg'] / one['router_us_per_msg']:.2f} x router CPU/msg")
    direct = medians.get(("queue direct to RabbitMQ", "none"))
    for kind in ("embedded", "embedded-tls", "qdrouterd", "mesh"):
        routed = medians.get(("queue via router", kind))
        if routed and direct and direct["rate"]:
            print(f"queue via {kind} / direct throughput ratio: "
                  f"{routed['rate'] / direct['rate']:.2f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    vhost = f"maas-bench-{uuid.uuid4().hex[:8]}"
    broker_user = requests.utils.quote(f"{USER}@{vhost}", safe="")
    workdir = Path(tempfile.mkdtemp(prefix="bench-router-"))  # kept if the run fails: logs
    routers: list[Router] = []
    auth = relay = None
    try:
        rabbit("PUT", f"/vhosts/{vhost}")
        rabbit("PUT", f"/users/{broker_user}", {"password": BROKER_PASSWORD, "tags": ""})
        rabbit("PUT", f"/permissions/{vhost}/{broker_user}",
               {"configure": ".*", "write": ".*", "read": ".*"})
        for queue in ("bq-embedded", "bq-embedded-tls", "bq-qdrouterd", "bq-mesh", "dq"):
            rabbit("PUT", f"/queues/{vhost}/{queue}", {"durable": True})

        auth = AuthServer(("127.0.0.1", free_port()), bench_verifier(vhost))
        threading.Thread(target=auth.serve_forever, daemon=True).start()
        routers.append(start_embedded(auth.server_address[1]))
        configure(routers[0], space_entities(routers[0], vhost, 5672, "bq-embedded"))
        ca = internal_ca()
        if ca:  # make run's connector: RabbitMQ's TLS listener (services.sh), checked
            routers.append(start_embedded(auth.server_address[1], ca))
            configure(routers[-1], space_entities(routers[-1], vhost, AMQPS_PORT,
                                                  "bq-embedded-tls"))
        else:
            print(f"no internal CA at {INTERNAL_CA}: the embedded router over TLS is left out")
        if qdrouterd.binary():
            relay_port = free_port()
            relay = subprocess.Popen([sys.executable, "-m", "dataplane.vhost_relay", "--listen",
                                      f"127.0.0.1:{relay_port}", "--broker", "127.0.0.1:5672",
                                      "--log-level", "WARNING"], cwd=ROOT,
                                     env=dict(os.environ, PYTHONPATH=str(ROOT)))
            wait_port(relay_port, relay, "the vhost relay")
            qdr = start_qdrouterd(auth.server_address[1], workdir)
            routers.append(qdr)
            configure(qdr, space_entities(qdr, vhost, relay_port, "bq-qdrouterd"))
            mesh = start_mesh(auth.server_address[1], workdir)
            routers.append(mesh)
            for router in (mesh, mesh.peer):  # each router of the space gets its entities
                configure(router, space_entities(mesh, vhost, relay_port, "bq-mesh"))
        else:
            print("QDROUTERD names no qdrouterd: the embedded router only")

        # The same client options on both routers: login `bench@<vhost>`, AMQP open hostname
        # the vhost (qdrouterd's multiTenant listener takes the vhost from it alone).
        client = {"user": f"{USER}@{vhost}", "password": PASSWORD, "allowed_mechs": "PLAIN",
                  "allow_insecure_mechs": True, "virtual_host": vhost}
        on_broker = {"user": f"{USER}@{vhost}", "password": BROKER_PASSWORD,
                     "allowed_mechs": "PLAIN", "allow_insecure_mechs": True,
                     "virtual_host": f"vhost:{vhost}"}
        beam = rabbit_pid()
        print(f"{args.count} x 100-byte messages, {args.clients} sender and {args.clients} "
              f"receiver processes, {os.cpu_count()} CPUs, {args.rounds} rounds, routers: "
              f"{', '.join(r.kind for r in routers)}")
        cases = [("anycast pre-settled", "any", True), ("anycast unsettled", "any", False),
                 ("queue via router", "bq", False)]
        results: dict[tuple[str, str], list[dict]] = {}
        for _ in range(args.rounds):
            for case, address, presettled in cases:
                for router in routers:
                    # a mesh: senders on its first router, receivers on the other, the CPU of both
                    receiving = router.peer or router
                    pids = {"router": (router.proc.pid, receiving.proc.pid)
                            if router.peer else router.proc.pid}
                    if address == "bq":
                        rabbit("DELETE", f"/queues/{vhost}/bq-{router.kind}/contents")
                        pids.update({"rabbit": beam} if beam else {})
                        pids.update({"relay": relay.pid}
                                    if not router.kind.startswith("embedded") else {})
                    target = (f"amqp://127.0.0.1:{router.amqp_port}", client, address)
                    source = (f"amqp://127.0.0.1:{receiving.amqp_port}", client, address)
                    results.setdefault((case, router.kind), []).append(run_case(
                        f"{case} ({router.kind})", target, source, args.count, args.clients,
                        presettled, pids))
            rabbit("DELETE", f"/queues/{vhost}/dq/contents")
            direct = ("amqp://127.0.0.1:5672", on_broker, "/amq/queue/dq")
            results.setdefault(("queue direct to RabbitMQ", "none"), []).append(run_case(
                "queue direct to RabbitMQ", direct, direct, args.count, args.clients, False,
                {"rabbit": beam} if beam else {}))
        print_table({key: median_row(runs) for key, runs in results.items()}, args.rounds)
        shutil.rmtree(workdir)
    finally:
        for router in routers:
            router.stop()
        if relay is not None:
            relay.terminate()
            relay.wait(10)
        if auth is not None:
            auth.shutdown()
            auth.server_close()
        requests.delete(f"{RABBIT_API}/vhosts/{vhost}", auth=GUEST, timeout=60)
        requests.delete(f"{RABBIT_API}/users/{broker_user}", auth=GUEST, timeout=60)


if __name__ == "__main__":
    main()
