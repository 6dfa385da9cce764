"""Benchmark of the live quota evaluation's reading (workers/usage/live.py) on a large store.

Writes one sample file per sampling round (every minute) into a temporary store, each with one
reading of every address (100,000 addresses of 1,000 tenants by default), then times
`today_so_far` for one tenant with the cut after the first 5 rounds (the lookback) and the rest
after it, as after an hourly job run. Prints figures; asserts nothing.

    .venv/bin/python tests/bench/bench_live_quota.py [--addresses 100000] [--rounds 65]
"""
import argparse
import shutil
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from spark.samples import COUNTERS, GAUGES, SCHEMA, write_table  # noqa: E402
from workers.usage import live  # noqa: E402

CUT = datetime(2026, 11, 20, 11, tzinfo=UTC)
LOOKBACK = timedelta(minutes=5)


def write_store(base: str, addresses: int, tenants: int, rounds: int) -> None:
    tenant = [f"t{i % tenants}" for i in range(addresses)]
    space = [f"s{i % (5 * tenants)}" for i in range(addresses)]
    address = [f"a{i}" for i in range(addresses)]
    for n in range(rounds):
        ts = CUT - LOOKBACK + timedelta(minutes=n)
        columns = {"sample_id": [uuid.uuid4().hex for _ in range(addresses)],
                   "ts": [ts] * addresses, "tenant": tenant, "space": space, "address": address,
                   "source": ["router:r"] * addresses, "kind": ["address"] * addresses,
                   **{name: [10 * n] * addresses for name in COUNTERS + GAUGES},
                   "epoch": ["e1"] * addresses, "since": [None] * addresses}
        write_table(pa.table(columns, schema=SCHEMA), base, ts + timedelta(seconds=5))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--addresses", type=int, default=100_000)
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=65)
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="maas-live-")
    try:
        started = time.monotonic()
        write_store(base, args.addresses, args.tenants, args.rounds)
        print(f"{args.rounds} files of {args.addresses:,} readings written in "
              f"{time.monotonic() - started:.1f} s")
        for _ in range(3):
            started = time.monotonic()
            today = live.today_so_far(base, "t7", cut=CUT, now=CUT + timedelta(hours=1),
                                      lookback=LOOKBACK, rollups=live.Rollups())
            print(f"today_so_far: {today.files} files, {today.readings} readings of the tenant, "
                  f"{time.monotonic() - started:.2f} s")
    finally:
        shutil.rmtree(base)


if __name__ == "__main__":
    main()
