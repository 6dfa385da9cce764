"""The embedded router's usage journal (`--state-dir`): a SIGKILL loses at most the last second
of counted deliveries, a SIGTERM nothing; counters come back with their epoch; a torn or garbage
journal is survived. A real router process per test (they restart it), real clients. The
router's configuration comes back with its own journal (test_config_journal.py); a test that
needs a router back empty removes that file."""

import random
import threading
import time

import pytest
from proton import Message, ProtonException, Timeout

from dataplane.router import config_journal
from dataplane.router.usage_journal import FILE_NAME

from .conftest import ADDRESS, RouterProcess, add_tenant

pytestmark = pytest.mark.slow

ROUTER_ADDRESS = "org.apache.qpid.dispatch.router.address"
VHOST = "uj"
USER, PASSWORD = "uj-user", "uj-password"  # unique: USERS is shared
GROUP = {"users": USER, "sources": "*", "targets": "*"}
PROMISE = 1.0  # seconds of counted deliveries a SIGKILL may lose (issue 17)


@pytest.fixture
def state_dir(tmp_path):
    return tmp_path / "state"


@pytest.fixture
def routers(state_dir):
    """Start a router on the test's state directory."""
    made = []

    def start(*extra):
        proc = RouterProcess(["--state-dir", str(state_dir), *extra])
        proc.start()
        made.append(proc)
        return proc

    yield start
    for proc in made:
        proc.stop()
        proc.own_auth.stop()


def configure(router, *addresses):
    """What the agents do for a router that (re)started empty: the vhost and the addresses."""
    mgmt = router.management()
    try:
        add_tenant(mgmt, VHOST, {USER: PASSWORD}, {"all": GROUP})
        for address in addresses:
            mgmt.create(ADDRESS, f"uj-{address}", prefix=f"{VHOST}/{address}")
    finally:
        mgmt.close()


def address_row(router, address: str) -> dict | None:
    mgmt = router.management()
    try:
        rows = [r for r in mgmt.query(ROUTER_ADDRESS)
                if r["address"] == f"{VHOST}/{address}" and r["phase"] == 0]
    finally:
        mgmt.close()
    assert len(rows) <= 1, rows
    return rows[0] if rows else None


def kill(router) -> None:
    router.proc.kill()
    router.proc.wait()
    router.proc = None


class Traffic:
    """One sender sending a message at a time, each settled once a receiver (in a thread of
    its own) accepted it."""

    def __init__(self, router, address: str):
        self.sent = 0  # sends begun
        self.delivered = 0  # sends the router settled as accepted
        self.received: list[float] = []  # when the receiver got each message
        self._stop = threading.Event()
        self.r_conn = router.connect(USER, PASSWORD, vhost=VHOST)
        self.receiver = self.r_conn.create_receiver(address, credit=10)
        self.thread = threading.Thread(target=self._receive, daemon=True)
        self.thread.start()
        self.s_conn = router.connect(USER, PASSWORD, vhost=VHOST)
        self.sender = self.s_conn.create_sender(address)

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                self.receiver.receive(0.2)
            except Timeout:
                continue
            except ProtonException:
                return  # the router went away
            self.received.append(time.monotonic())
            try:
                self.receiver.accept()
            except ProtonException:
                return

    def send(self, seconds: float) -> float:
        """Send for `seconds` or until the router goes away; returns the time spent."""
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            self.sent += 1
            try:
                self.sender.send(Message(body=f"delivery {self.sent:08d}"), timeout=5)
            except ProtonException:
                break
            self.delivered += 1
        return time.monotonic() - start

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(5)
        for conn in (self.s_conn, self.r_conn):
            try:
                conn.close()
            except ProtonException:
                pass


def test_a_sigkill_loses_at_most_one_second_of_counted_deliveries(routers):
    router = routers()
    configure(router, "kill")
    traffic = Traffic(router, "kill")
    # anywhere between two flushes of the journal
    killed_at = []
    killer = threading.Timer(2.5 + random.random(), lambda: (killed_at.append(time.monotonic()),
                                                             kill(router)))
    killer.start()
    elapsed = traffic.send(30)  # until the kill
    killer.join()
    traffic.stop()
    assert 2.5 < elapsed < 10, "the router was not killed mid-batch"
    received = len(traffic.received)
    # one second of traffic: what the receiver got in the last second before the kill (and
    # after it, on its way when the router died)
    bound = sum(1 for t in traffic.received if t > killed_at[0] - PROMISE)
    router.start()  # the same state directory
    row = address_row(router, "kill")
    assert row is not None, "nothing read back"
    lost = received - row["deliveriesEgress"]
    print(f"\nSIGKILL mid-batch: {received} deliveries received in {elapsed:.2f} s "
          f"({received / elapsed:.0f}/s), {row['deliveriesEgress']} read back from the "
          f"journal: {lost} lost (at most {bound}, the last second's)")
    assert received - bound <= row["deliveriesEgress"]
    assert row["deliveriesEgress"] <= row["deliveriesIngress"] <= traffic.sent
    assert row["countersEpoch"] != ""


def test_a_sigterm_loses_nothing(routers):
    router = routers()
    configure(router, "term")
    traffic = Traffic(router, "term")
    traffic.send(1.5)  # past a flush, and the last ones after it
    before = address_row(router, "term")
    traffic.stop()
    router.stop()  # SIGTERM
    router.start()
    after = address_row(router, "term")
    assert traffic.delivered > 0
    assert after["deliveriesIngress"] == after["deliveriesEgress"] == traffic.delivered
    assert after["acceptedDeliveries"] == traffic.delivered
    assert after["bytesIngress"] == before["bytesIngress"] > 0
    assert (after["countersEpoch"], after["countersSince"]) == (before["countersEpoch"],
                                                                before["countersSince"])


def test_counting_goes_on_from_what_was_read_back(routers):
    router = routers()
    configure(router, "on")
    first = Traffic(router, "on")
    first.send(0.5)
    first.stop()
    router.restart()  # its configuration comes back with it
    second = Traffic(router, "on")
    second.send(0.5)
    second.stop()
    row = address_row(router, "on")
    assert row["deliveriesIngress"] == first.delivered + second.delivered


def test_a_torn_or_garbage_tail_of_the_journal_is_ignored(routers, state_dir):
    router = routers()
    configure(router, "torn")
    first = Traffic(router, "torn")
    first.send(0.5)
    first.stop()
    before = address_row(router, "torn")
    router.stop()
    journal = state_dir / FILE_NAME
    last = journal.read_text().splitlines()[-1]
    with journal.open("a") as f:
        f.write("not json at all\n")
        f.write(f'["{VHOST}/torn", 0, "bogus.1", 1.0, "balanced", -5, 0, 0, 0, 0, 0, 0, 0, '
                '0, 0]\n')
        f.write(last[:len(last) // 2])  # a kill in the middle of an append
    router.start()
    row = address_row(router, "torn")
    assert row["deliveriesIngress"] == first.delivered
    assert row["countersEpoch"] == before["countersEpoch"]
    # what is appended after the torn line is read back too
    second = Traffic(router, "torn")
    second.send(0.5)
    second.stop()
    time.sleep(2 * PROMISE)  # journalled by now
    kill(router)
    router.start()
    assert address_row(router, "torn")["deliveriesIngress"] == (first.delivered
                                                                + second.delivered)


def test_an_unreadable_journal_is_set_aside_and_counting_starts_afresh(routers, state_dir):
    state_dir.mkdir()
    (state_dir / FILE_NAME).write_bytes(b"\x00\xffgarbage from the first byte\n")
    router = routers()
    configure(router, "fresh")
    traffic = Traffic(router, "fresh")
    traffic.send(0.3)
    traffic.stop()
    row = address_row(router, "fresh")
    assert row["deliveriesIngress"] == traffic.delivered and row["countersEpoch"] != ""
    assert (state_dir / (FILE_NAME + ".corrupt")).read_bytes().startswith(b"\x00\xffgarbage")


def test_an_address_deleted_before_a_kill_does_not_come_back(routers):
    router = routers()
    configure(router, "stays", "goes")
    for address in ("stays", "goes"):
        traffic = Traffic(router, address)
        traffic.send(0.2)
        traffic.stop()
    mgmt = router.management()
    assert mgmt.delete(ADDRESS, "uj-goes")[0] == 204
    mgmt.close()
    time.sleep(2 * PROMISE)  # journalled by now
    kill(router)
    router.start()
    assert address_row(router, "goes") is None
    assert address_row(router, "stays")["deliveriesIngress"] > 0


def test_the_sweep_drops_what_was_not_configured_again(routers, state_dir):
    router = routers("--usage-sweep-after", "4")
    configure(router, "again", "never")
    for address in ("again", "never"):
        traffic = Traffic(router, address)
        traffic.send(0.2)
        traffic.stop()
    router.stop()
    (state_dir / config_journal.FILE_NAME).unlink()  # back empty, as without the journal
    router.start()
    assert address_row(router, "never") is not None  # before the sweep may run
    configure(router, "again")
    deadline = time.monotonic() + 10
    while address_row(router, "never") is not None:
        assert time.monotonic() < deadline, "not swept"
        time.sleep(0.2)
    assert address_row(router, "again")["deliveriesIngress"] > 0
