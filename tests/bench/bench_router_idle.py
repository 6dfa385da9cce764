"""The embedded router at rest with many idle connections (issue 16): its CPU, printed, never
asserted.

At 100k the router holds a connector per standard space (800), and the brokers' heartbeats on
them woke its loop some fifty times a second (strace of the 100k platform at rest: 51 reads and
78 writes a second). This bench opens --connections AMQP connections to the router, each of
which, once open, sends an empty frame (a heartbeat) every --heartbeat seconds, then reads the
router's CPU over --seconds, --rounds times. The peers are proton transports driven by hand
over plain sockets in one selector, so that the bench's own cost stays out of the router's.

    .venv/bin/python tests/bench/bench_router_idle.py [--connections 800] [--heartbeat 16]
"""
import argparse
import os
import random
import selectors
import socket
import statistics
import sys
import time
from pathlib import Path

from proton import Connection, Endpoint, Transport

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.common import cpu_seconds  # noqa: E402
from tests.router.conftest import RouterProcess, add_tenant  # noqa: E402

EMPTY_FRAME = b"\x00\x00\x00\x08\x02\x00\x00\x00"  # size 8, doff 2, AMQP, channel 0: no body
VHOST, USER, PASSWORD = "idle", "peer", "peer-pw"


class Peer:
    """One AMQP connection: SASL PLAIN and open through a proton transport, then heartbeats
    written straight to the socket (what a broker's idle-timeout keepalive looks like)."""

    def __init__(self, port: int):
        self.conn = Connection()
        self.conn.hostname = VHOST
        self.conn.user, self.conn.password = f"{USER}@{VHOST}", PASSWORD
        self.transport = Transport()
        sasl = self.transport.sasl()
        sasl.allowed_mechs("PLAIN")
        sasl.allow_insecure_mechs = True
        self.transport.bind(self.conn)
        self.conn.open()
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setblocking(False)
        self.opened = self.closed = False

    def pump(self) -> None:
        """Moves bytes both ways until the open is answered; afterwards drains what comes."""
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            data = None
        except OSError:
            data = b""
        if data == b"":
            self.closed = True
        if self.opened or self.closed:
            return
        if data:
            self.transport.push(data)
        while self.transport.pending() > 0:
            out = self.transport.peek(self.transport.pending())
            self.transport.pop(self.sock.send(out))
        if self.conn.state & Endpoint.REMOTE_ACTIVE:
            self.opened = True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=800)
    parser.add_argument("--heartbeat", type=float, default=16.0,
                        help="seconds between two empty frames of a connection")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    router = RouterProcess()
    router.start()
    selector = selectors.DefaultSelector()
    try:
        mgmt = router.management()
        add_tenant(mgmt, VHOST, {USER: PASSWORD},
                   {"all": {"users": USER, "sources": "*", "targets": "*"}},
                   maxConnections=args.connections + 10)
        mgmt.close()
        # In batches: the auth service answers a bounded number of logins at once.
        peers: list[Peer] = []
        deadline = time.monotonic() + 120
        while len(peers) < args.connections and time.monotonic() < deadline:
            batch = [Peer(router.amqp_port) for _ in range(min(25, args.connections - len(peers)))]
            for peer in batch:
                selector.register(peer.sock, selectors.EVENT_READ, peer)
                peer.pump()
            until = time.monotonic() + 10
            while time.monotonic() < until and not all(p.opened or p.closed for p in batch):
                for key, _ in selector.select(0.5):
                    key.data.pump()
            for peer in batch:
                if peer.opened:
                    peers.append(peer)
                else:
                    selector.unregister(peer.sock)
                    peer.sock.close()
        opened = sum(p.opened for p in peers)
        print(f"{opened} of {args.connections} connections open, a heartbeat each every "
              f"{args.heartbeat:.0f} s", flush=True)
        # Each peer's beat at a random phase, as the brokers' are.
        due = sorted((time.monotonic() + random.uniform(0, args.heartbeat), i)
                     for i in range(len(peers)))
        shares = []
        for _ in range(args.rounds):
            before, began = cpu_seconds(router.proc.pid), time.monotonic()
            while time.monotonic() - began < args.seconds:
                now = time.monotonic()
                while due[0][0] <= now:
                    _, i = due.pop(0)
                    peers[i].sock.send(EMPTY_FRAME)
                    due.append((now + args.heartbeat, i))
                    due.sort()
                wait = min(0.5, max(0.0, due[0][0] - time.monotonic()))
                for key, _ in selector.select(wait):
                    key.data.pump()
            share = (cpu_seconds(router.proc.pid) - before) / (time.monotonic() - began) * 100
            shares.append(share)
            print(f"  router CPU: {share:.1f}% of a core over {args.seconds:.0f} s (load avg "
                  f"{' '.join(f'{x:.2f}' for x in os.getloadavg())})", flush=True)
        print(f"median: {statistics.median(shares):.1f}% of a core with {opened} idle "
              f"connections ({opened / args.heartbeat:.0f} heartbeats a second)")
    finally:
        router.stop()
        router.own_auth.stop()


if __name__ == "__main__":
    main()
