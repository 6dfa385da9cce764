"""The router agent's kept management connections, per process: opening one costs about as
much as the reconcile of a small change, so each reconcile takes an idle one to its router and
gives it back."""
import os
import threading
import time

from workers import endpoints
from workers.clients.qdr import Management

# An idle management connection is kept for the next reconcile of this process for so long:
# opening one (SASL relayed to the auth service, the schema read again) costs about as much as
# the reconcile of a small change, and at 100,000 addresses on qdrouterd more than the rest of
# it. Below the management listener's idle timeout (dataplane/qdrouterd.py,
# MANAGEMENT_IDLE_SECONDS; the embedded router has none), and within the idle timeouts of the
# usual load balancers (4 minutes and more), which drop a connection without telling either end.
POOL_IDLE_SECONDS = 240.0
# Idle connections of this process by management URL: [(Management, released at)]. A
# reconcile takes one out and gives it back, so each is used by one thread at a time (the
# parallel agents run in threads that live for one task).
_pool: dict[str, list] = {}
_pool_lock = threading.Lock()
_pool_pid = os.getpid()  # a forked worker does not use its parent's sockets


def take(router: endpoints.RouterEndpoint) -> Management | None:
    """A kept connection to `router` that has not idled too long, or None."""
    global _pool_pid
    found, stale = None, []
    with _pool_lock:
        if _pool_pid != os.getpid():
            _pool.clear()
            _pool_pid = os.getpid()
        idle = _pool.get(router.management_url, [])
        while idle and found is None:
            mgmt, released = idle.pop()
            fresh = time.monotonic() - released <= POOL_IDLE_SECONDS
            if fresh and mgmt.user == router.admin_user:
                found = mgmt
            else:
                stale.append(mgmt)
    for mgmt in stale:  # outside the lock: closing waits for the router's answer
        mgmt.close()
    return found


def give_back(mgmt: Management) -> None:
    mgmt.pooled = True
    with _pool_lock:
        _pool.setdefault(mgmt.url, []).append((mgmt, time.monotonic()))


def pooled_count() -> int:
    """Idle management connections this process keeps (tests, diagnostics)."""
    with _pool_lock:
        return sum(len(idle) for idle in _pool.values())


def close_pooled() -> None:
    """Closes every kept connection (a router about to go away, tests)."""
    with _pool_lock:
        kept = [mgmt for idle in _pool.values() for mgmt, _ in idle]
        _pool.clear()
    for mgmt in kept:
        mgmt.close()
