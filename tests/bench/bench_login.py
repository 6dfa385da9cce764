"""What one client connection to the embedded router costs: TCP connect, SASL PLAIN and the
AMQP open, then close. Prints the median and the 90th percentile of N logins, with proton's
BlockingConnection (what an application sees) and with a bare socket client speaking the frames
itself (the router's and auth service's share, without the client library's), once with the
router relaying SASL to the auth service in plain text and once over TLS, checking its
certificate (`--auth-service-ca`, as `make run` does); asserts nothing.

    .venv/bin/python tests/bench/bench_login.py [--count 200]

Uses the router tests' fixtures (tests/router/conftest.py): a router process on free ports and
the real auth service in a thread, checking a fixed set of users.
"""

import argparse
import socket
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dataplane.authservice import sasl  # noqa: E402
from tests.router.conftest import FixedAuthService, RouterProcess, add_tenant  # noqa: E402
from workers.agents.router.certificates import ensure_self_signed  # noqa: E402


def bare_login(port: int, login: str, password: str, source: str = "127.0.0.1",
               timeout: float = 5.0) -> None:
    """TCP from `source`, SASL PLAIN, an AMQP open naming the login's vhost (`<user>@<vhost>`:
    qdrouterd's policy follows the open's hostname) and its close, frame by frame."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                  source_address=(source, 0)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = sasl.Reader(sock, time.monotonic() + timeout)
        sock.sendall(sasl.SASL_HEADER)
        assert reader.header() == sasl.SASL_HEADER
        assert reader.performative(sasl.SASL_FRAME).code == sasl.MECHANISMS
        sock.sendall(sasl.init("PLAIN", f"\0{login}\0{password}".encode()))
        outcome = reader.performative(sasl.SASL_FRAME)
        assert outcome.code == sasl.OUTCOME and outcome.field(0) == sasl.OK, outcome.field(0)
        vhost = login.rpartition("@")[2] or None
        sock.sendall(sasl.AMQP_HEADER + sasl.client_open("bench", hostname=vhost))
        assert reader.header() == sasl.AMQP_HEADER
        assert reader.performative(sasl.AMQP_FRAME).code == sasl.OPEN
        sock.sendall(sasl.close_frame())
        closing = reader.performative(sasl.AMQP_FRAME)
        assert closing.code == sasl.CLOSE and closing.field(0) is None, closing.field(0)


def report(name: str, times: list[float]) -> None:
    times.sort()
    print(f"{name}: {len(times)} logins, median {statistics.median(times) * 1000:.2f} ms, "
          f"p90 {times[int(len(times) * 0.9)] * 1000:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=200)
    args = parser.parse_args()
    cert, key = (str(Path(tempfile.mkdtemp()) / name) for name in ("cert.pem", "key.pem"))
    ensure_self_signed(cert, key, "127.0.0.1")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    for relay, service, extra in (
            ("plain", FixedAuthService(), []),
            ("TLS", FixedAuthService(ssl_context=context), ["--auth-service-ca", cert])):
        print(f"-- the router's relay to the auth service: {relay}")
        # One source logs in again and again: lift the per-source pace (docs/security.md),
        # which would otherwise refuse most of these logins; what is measured is a login's cost.
        unpaced = ["--connect-rate-per-host", "100000", "--connect-burst-per-host", "100000"]
        measure(RouterProcess(extra_args=extra + unpaced, auth_port=service.port), args.count)
        service.stop()


def measure(router: RouterProcess, count: int) -> None:
    router.start()
    try:
        mgmt = router.management()
        add_tenant(mgmt, "bench", {"bench": "bench-pw"},
                   {"all": {"users": "bench", "sources": "*", "targets": "*"}})
        mgmt.close()
        times = []
        for _ in range(count):
            start = time.perf_counter()
            conn = router.connect("bench@bench", "bench-pw")
            times.append(time.perf_counter() - start)
            conn.close()
        report("BlockingConnection (connect, SASL, open)", times)
        times = []
        for _ in range(count):
            start = time.perf_counter()
            bare_login(router.amqp_port, "bench@bench", "bench-pw")
            times.append(time.perf_counter() - start)
        report("bare client (connect, SASL, open, close)", times)
    finally:
        router.stop()


if __name__ == "__main__":
    main()
