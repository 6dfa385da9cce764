"""Who may open a connection to a client listener (the embedded router's, the MQTT gateway's),
before it costs them or the auth service anything: per source address, a cap on connections
still authenticating and a token bucket of new ones, and a delay on the logins of a source whose
logins keep failing.

A client that opens sockets and sends nothing (or a byte now and then) holds one slot of its
source's cap until its SASL deadline, and none of another source's; a source that fails logins
waits longer before each next one is checked. What is refused is closed at accept, before TLS
or SASL, and counted (`refused`), so that an operator sees it on /metrics.
"""
import time
from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    pending_per_source: int = 64  # connections not yet authenticated, per source address
    pending_total: int = 4096  # the same, over every source
    rate_per_source: float = 100.0  # new connections a second, per source, on average...
    burst_per_source: float = 200.0  # ...and at once
    failure_delay: float = 0.1  # after a source's failed login, its next ones wait this long,
    failure_delay_max: float = 2.0  # doubling with each failure up to this
    failure_memory: float = 60.0  # seconds after which a source's failures are forgotten


SWEEP_EVERY = 10.0  # seconds between two sweeps of the sources that need no remembering


class _Source:
    __slots__ = ("pending", "tokens", "refilled", "failures", "failed_at")

    def __init__(self, now: float, burst: float):
        self.pending = 0
        self.tokens, self.refilled = burst, now
        self.failures, self.failed_at = 0, now


class Admission:
    REASONS = ("pending_total", "pending_per_source", "rate_per_source")

    def __init__(self, limits: Limits | None = None, clock=time.monotonic):
        self.limits = limits or Limits()
        self.clock = clock
        self._sources: dict[str, _Source] = {}
        self._swept = clock()
        self.pending = 0
        self.refused: Counter = Counter()  # reason -> connections refused at accept
        self.failures_total = 0  # logins refused

    def _source(self, address: str, now: float) -> _Source:
        source = self._sources.get(address)
        if source is None:
            source = self._sources[address] = _Source(now, self.limits.burst_per_source)
        return source

    def accept(self, address: str) -> bool:
        """Whether a new connection from `address` may go on; if so it counts as pending."""
        now, limits = self.clock(), self.limits
        if now - self._swept >= SWEEP_EVERY:
            self._sweep(now)
        source = self._source(address, now)
        source.tokens = min(limits.burst_per_source,
                            source.tokens + (now - source.refilled) * limits.rate_per_source)
        source.refilled = now
        reason = None
        if self.pending >= limits.pending_total:
            reason = "pending_total"
        elif source.pending >= limits.pending_per_source:
            reason = "pending_per_source"
        elif source.tokens < 1:
            reason = "rate_per_source"
        if reason is not None:
            self.refused[reason] += 1
            self._forget_if_idle(address, source, now)
            return False
        source.tokens -= 1
        source.pending += 1
        self.pending += 1
        return True

    def settled(self, address: str) -> None:
        """A pending connection authenticated, failed or went away: it no longer counts."""
        source = self._sources.get(address)
        if source is None or source.pending == 0:
            return
        source.pending -= 1
        self.pending -= 1
        self._forget_if_idle(address, source, self.clock())

    def failed(self, address: str) -> None:
        self.failures_total += 1
        now = self.clock()
        source = self._source(address, now)
        if now - source.failed_at > self.limits.failure_memory:
            source.failures = 0
        source.failures += 1
        source.failed_at = now

    def succeeded(self, address: str) -> None:
        """A login from `address` succeeded: its failures are forgiven (a source shared by many
        clients, behind one NAT, is not held back for one client's mistakes)."""
        source = self._sources.get(address)
        if source is not None:
            source.failures = 0

    def delay(self, address: str) -> float:
        """How long a login from `address` waits before it is checked."""
        source = self._sources.get(address)
        if source is None or source.failures == 0:
            return 0.0
        if self.clock() - source.failed_at > self.limits.failure_memory:
            return 0.0
        return min(self.limits.failure_delay_max,
                   self.limits.failure_delay * 2 ** (source.failures - 1))

    def _idle(self, source: _Source, now: float) -> bool:
        """Nothing pending, a full bucket and no failure to remember: nothing to keep."""
        full = source.tokens + (now - source.refilled) * self.limits.rate_per_source \
            >= self.limits.burst_per_source
        return source.pending == 0 and full and (
            source.failures == 0 or now - source.failed_at > self.limits.failure_memory)

    def _forget_if_idle(self, address: str, source: _Source, now: float) -> None:
        if self._idle(source, now):
            del self._sources[address]

    def _sweep(self, now: float) -> None:
        """Forgets every idle source, so that the table holds only the sources that matter now
        however many came once and never again."""
        self._swept = now
        for address in [a for a, source in self._sources.items() if self._idle(source, now)]:
            del self._sources[address]
