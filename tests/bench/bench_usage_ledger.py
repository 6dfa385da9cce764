"""What the embedded router's usage journal costs its loop: one flush (the per-second append)
with every entry changed, with 1 % changed, with none changed but traffic elsewhere (the scan of
the entries that have a node), a rewrite (compaction) and the read back at start. The ledger
and journal of the router, in this process, on a temporary directory; asserts nothing.

    .venv/bin/python tests/bench/bench_usage_ledger.py [--entries 20000 100000] [--rounds 5]
"""

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dataplane.router.counters import Counters  # noqa: E402
from dataplane.router.usage_ledger import UsageLedger  # noqa: E402


def ledger_of(directory: str, n: int) -> tuple[UsageLedger, list[Counters]]:
    ledger = UsageLedger(configured=lambda key: {"prefix": key})
    ledger.open_journal(directory)
    counts = [ledger.attach(f"tenant-{i % 50}.space/address-{i}", 0, False) for i in range(n)]
    return ledger, counts


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def bump(counts, total: Counters) -> None:
    for c in counts:
        c.ingress += 1
        c.egress += 1
        c.bytes_in += 100
        c.bytes_out += 100
        c.accepted += 1
        total.ingress += 1


def measure_flushes(directory: str, n: int, rounds: int) -> dict:
    ledger, counts = ledger_of(directory, n)
    total = Counters()
    ledger.flush(total)  # the new entries
    results: dict[str, list[float]] = {"all": [], "1%": [], "none": [], "idle": []}
    for _ in range(rounds):
        bump(counts, total)
        results["all"].append(timed(lambda: ledger.flush(total)))
        bump(counts[:: 100], total)
        results["1%"].append(timed(lambda: ledger.flush(total)))
        total.ingress += 1  # traffic on a node the ledger does not meter
        results["none"].append(timed(lambda: ledger.flush(total)))
        results["idle"].append(timed(lambda: ledger.flush(total)))
    rewrite = timed(ledger._rewrite)
    ledger.close(total)
    return {k: statistics.median(v) for k, v in results.items()} | {
        "rewrite": rewrite, "bytes": ledger.journal.path.stat().st_size}


def measure(n: int, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as directory:
        results = measure_flushes(directory, n, rounds)
        gc.collect()  # as in a router that starts: the first ledger is not there
        again = UsageLedger(configured=lambda key: None)
        results["load"] = timed(lambda: again.open_journal(directory))
        assert len(again.entries) == n
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--entries", type=int, nargs="+", default=[20000, 100000])
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    print("| entries | flush, all changed | 1 % changed | none changed (scan) | idle "
          "| rewrite | read back | journal size |")
    print("|---|---|---|---|---|---|---|---|")
    for n in args.entries:
        r = measure(n, args.rounds)
        print(f"| {n:,} | {r['all']:.1f} ms | {r['1%']:.2f} ms | {r['none']:.2f} ms "
              f"| {r['idle']:.3f} ms | {r['rewrite']:.0f} ms | {r['load']:.0f} ms "
              f"| {r['bytes'] / 1e6:.1f} MB |")


if __name__ == "__main__":
    main()
