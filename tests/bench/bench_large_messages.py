"""The embedded router's memory around large messages (printed, not asserted): its RSS before,
at most during, and a few seconds after --count messages of --size MiB sent to an anycast
address whose vhost policy allows --limit bytes (a larger message is refused at the limit, its
connection closed; a smaller one is carried to a receiver).

    .venv/bin/python tests/bench/bench_large_messages.py --count 100 --size 50           # refused
    .venv/bin/python tests/bench/bench_large_messages.py --count 20 --size 50 --limit 0  # carried

Uses the router tests' fixtures (tests/router/conftest.py): a router process on free ports with
an auth service of its own over fixed users.
"""
import argparse
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from proton import Endpoint, Message  # noqa: E402
from proton.utils import ConnectionClosed, LinkDetached, SendException  # noqa: E402

from tests.router.conftest import ADDRESS, RouterProcess, add_tenant, pump_until  # noqa: E402


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--size", type=float, default=50.0, help="MiB per message")
    parser.add_argument("--limit", type=int, default=1 << 20, help="bytes; 0: no limit")
    args = parser.parse_args()
    router = RouterProcess()
    router.start()
    try:
        mgmt = router.management()
        group = {"users": "big", "sources": "*", "targets": "*"}
        if args.limit:
            group["maxMessageSize"] = args.limit
        add_tenant(mgmt, "lg", {"big": "big-pw"}, {"all": group})
        mgmt.create(ADDRESS, "lg-any", prefix="lg/any", distribution="balanced")
        mgmt.close()
        receiving = router.connect("big", "big-pw", vhost="lg")
        receiver = receiving.create_receiver("any/big", credit=1)
        pid = router.proc.pid
        before = rss_mib(pid)
        most = [before]
        done = threading.Event()

        def watch():
            while not done.is_set():
                most.append(rss_mib(pid))
                time.sleep(0.05)

        threading.Thread(target=watch, daemon=True).start()
        body = b"m" * int(args.size * (1 << 20))
        refused = carried = 0
        started = time.monotonic()
        for _ in range(args.count):
            conn = router.connect("big", "big-pw", vhost="lg")
            sender = conn.create_sender("any/big")
            pump_until(lambda s=sender: s.link.credit > 0, conn, receiving, timeout=10)
            # Both connections do their I/O: the receiver's accept settles the sender's message.
            sender.link.send(Message(body=body))

            def over(conn=conn):
                closed = conn.conn.state & Endpoint.REMOTE_CLOSED
                return bool(receiver.fetcher.incoming) or bool(closed)

            try:
                pump_until(over, conn, receiving, timeout=120)
            except (SendException, LinkDetached, ConnectionClosed):
                pass
            if receiver.fetcher.incoming:
                receiver.receive(timeout=1)
                receiver.accept()
                carried += 1
            else:
                refused += 1
            try:
                conn.close()
            except ConnectionClosed:
                pass
        elapsed = time.monotonic() - started
        time.sleep(3)  # the router trims its heap a second after a large message
        done.set()
        after = rss_mib(pid)
        print(f"{args.count} messages of {args.size:g} MiB, limit "
              f"{args.limit or 'none'}: {carried} carried, {refused} refused, in {elapsed:.1f} s")
        print(f"router RSS: before {before:.0f} MiB, at most {max(most):.0f} MiB during, "
              f"{after:.0f} MiB 3 s after")
        receiving.close()
    finally:
        router.stop()


if __name__ == "__main__":
    main()
