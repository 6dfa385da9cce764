"""What one client connection to the embedded router costs: TCP connect, SASL PLAIN and the
AMQP open, then close. Prints the median and the 90th percentile of N logins; asserts nothing.

    .venv/bin/python tests/bench/bench_login.py [--count 200]

Uses the router tests' fixtures (tests/router/conftest.py): a router process on free ports and
whatever it authenticates against there.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.router.conftest import RouterProcess, add_tenant  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=200)
    args = parser.parse_args()
    router = RouterProcess()
    router.start()
    try:
        mgmt = router.management()
        add_tenant(mgmt, "bench", {"bench": "bench-pw"},
                   {"all": {"users": "bench", "sources": "*", "targets": "*"}})
        mgmt.close()
        times = []
        for _ in range(args.count):
            start = time.perf_counter()
            conn = router.connect("bench@bench", "bench-pw")
            times.append(time.perf_counter() - start)
            conn.close()
        times.sort()
        print(f"{args.count} logins: median {statistics.median(times) * 1000:.2f} ms, "
              f"p90 {times[int(len(times) * 0.9)] * 1000:.2f} ms")
    finally:
        router.stop()


if __name__ == "__main__":
    main()
