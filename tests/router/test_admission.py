"""The admission of connections per source address (dataplane/admission.py), on a clock of the
test's: caps on connections still authenticating, a token bucket of new ones, and delays after
failed logins that grow and are forgotten."""
from dataplane.admission import Admission, Limits


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def admission(**limits) -> tuple[Admission, Clock]:
    clock = Clock()
    return Admission(Limits(**limits), clock=clock), clock


def test_a_source_holds_at_most_its_share_of_connections_still_logging_in():
    a, _ = admission(pending_per_source=3, pending_total=100)
    assert [a.accept("10.0.0.1") for _ in range(4)] == [True, True, True, False]
    assert a.accept("10.0.0.2")  # another source is not held back
    a.settled("10.0.0.1")  # one of them logged in (or went away)
    assert a.accept("10.0.0.1")
    assert a.refused["pending_per_source"] == 1


def test_every_source_together_holds_at_most_the_total():
    a, _ = admission(pending_per_source=10, pending_total=2)
    assert a.accept("10.0.0.1") and a.accept("10.0.0.2")
    assert not a.accept("10.0.0.3")
    assert a.refused == {"pending_total": 1}


def test_new_connections_come_at_the_rate_of_the_bucket():
    a, clock = admission(rate_per_source=2.0, burst_per_source=4.0, pending_per_source=100)
    opened = [a.accept("10.0.0.1") for _ in range(6)]
    assert opened == [True] * 4 + [False] * 2  # the burst, then nothing left
    clock.now += 1.0  # two more tokens a second
    assert [a.accept("10.0.0.1") for _ in range(3)] == [True, True, False]
    assert a.refused["rate_per_source"] == 3


def test_failed_logins_of_a_source_delay_its_next_ones_more_each_time_until_forgotten():
    a, clock = admission(failure_delay=0.1, failure_delay_max=0.5, failure_memory=60.0)
    assert a.delay("10.0.0.1") == 0.0
    delays = []
    for _ in range(5):
        a.failed("10.0.0.1")
        delays.append(a.delay("10.0.0.1"))
    assert delays == [0.1, 0.2, 0.4, 0.5, 0.5]
    assert a.delay("10.0.0.2") == 0.0  # only that source
    clock.now += 61
    assert a.delay("10.0.0.1") == 0.0
    a.failed("10.0.0.1")  # counted from one again
    assert a.delay("10.0.0.1") == 0.1
    a.failed("10.0.0.1")
    a.succeeded("10.0.0.1")  # another client of that source got in: forgiven
    assert a.delay("10.0.0.1") == 0.0
    assert a.failures_total == 7


def test_sources_that_came_once_are_forgotten():
    a, clock = admission(rate_per_source=10.0, burst_per_source=10.0)
    for i in range(100):
        assert a.accept(f"10.0.1.{i}")
        a.settled(f"10.0.1.{i}")
    a.failed("10.0.2.1")  # remembered for a while
    clock.now += 11  # their buckets refilled, a sweep due
    assert a.accept("10.0.0.9")
    assert set(a._sources) == {"10.0.0.9", "10.0.2.1"} and a.pending == 1
