"""The usage ledger and its journal in this process, without a router: the journal stays a few
times the ledger however long it runs and reads back the last values, epochs are never reused,
and a sweep step looks at a bounded number of entries."""

from dataplane.router.counters import Counters
from dataplane.router.usage_journal import FILE_NAME
from dataplane.router.usage_ledger import COMPACT_FACTOR, COMPACT_SLACK, UsageLedger


class Config:
    """The router's address configuration as the ledger asks it: configured or not."""

    def __init__(self):
        self.addresses: set[str] = set()

    def __call__(self, key: str):
        return {"prefix": key} if key in self.addresses else None


def test_the_journal_stays_a_few_times_the_ledger_and_reads_back_the_last_values(tmp_path):
    config = Config()
    ledger = UsageLedger(config)
    ledger.open_journal(tmp_path)
    counts = [ledger.attach(f"v/a{i}", 0, False) for i in range(100)]
    total = Counters()
    longest = 0
    for _ in range(200):
        for c in counts:
            c.ingress += 1
            c.bytes_in += 10
        total.ingress += len(counts)
        ledger.flush(total)
        longest = max(longest, len((tmp_path / FILE_NAME).read_text().splitlines()))
    ledger.close(total)
    assert longest <= 1 + COMPACT_FACTOR * 100 + COMPACT_SLACK  # 20,000 lines appended
    again = UsageLedger(config)
    again.open_journal(tmp_path)
    assert {(e.counts.ingress, e.counts.bytes_in) for e in again.entries.values()} == {(200, 2000)}
    assert {e.epoch for e in again.entries.values()} == {e.epoch for e in ledger.entries.values()}


def test_an_epoch_names_one_counter_instance_only(tmp_path):
    config = Config()
    ledger = UsageLedger(config)
    ledger.open_journal(tmp_path)
    ledger.attach("v/a", 0, False)
    first = ledger.entries[("v/a", 0)].epoch
    ledger.detach("v/a", 0)  # not configured: dropped
    ledger.attach("v/a", 0, False)
    second = ledger.entries[("v/a", 0)].epoch
    ledger.close(Counters())
    next_run = UsageLedger(config)
    next_run.open_journal(tmp_path)
    next_run.attach("v/b", 0, False)
    third = next_run.entries[("v/b", 0)].epoch
    assert len({first, second, third}) == 3
    assert next_run.entries[("v/a", 0)].epoch == second


def test_a_sweep_step_looks_at_a_bounded_number_of_entries():
    config = Config()
    ledger = UsageLedger(config)
    config.addresses = {f"v/a{i}" for i in range(2500)}
    for i in range(2500):
        ledger.attach(f"v/a{i}", 0, False)
        ledger.detach(f"v/a{i}", 0)
    config.addresses = {"v/a7"}
    left = []
    for _ in range(3):
        ledger.sweep_step(budget=1000)
        left.append(len(ledger.entries))
    assert left == [1501, 501, 1]  # a thousand at a time; a7, configured, stays
