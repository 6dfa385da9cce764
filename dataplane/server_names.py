"""A TLS listener's certificate chosen by the name the client asks for (SNI): the certificate
of the space endpoint that has that host name, else the listener's own (the platform's).

Two sources. Files: the workers write each endpoint's certificate chain and key as
`<directory>/<host>/tls.crt` and `tls.key` (workers/certificates.py), which the embedded router
and the brokered spaces' relays read (`ServerNames(directory)`): a file is read when a name is
first asked for and again once it changed (looked at most every `RECHECK` seconds per name);
names with no directory cost one `stat`. A lookup: the MQTT gateway, which reaches the control
plane's database wherever it runs (Kubernetes included), asks it (`ServerNames(lookup=...)`,
maas/bindings.py), at most `LOOKUPS_PER_SECOND` names a second (a client sending made-up names
gets the platform's certificate beyond that), each answer kept `RECHECK_LOOKUP` seconds.
`install(context)` sets the context's SNI callback. Sans Django; used by processes that never
import each other.
"""
import concurrent.futures
import logging
import os
import re
import ssl
import tempfile
import time
from collections.abc import Callable

logger = logging.getLogger("dataplane.server_names")

HOST = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")
RECHECK = 5.0  # seconds between looks at a name's files
RECHECK_LOOKUP = 30.0  # seconds a lookup's answer (a certificate or none) is kept
LOOKUPS_PER_SECOND = 20.0
LOOKUP_TIMEOUT = 2.0  # seconds a handshake waits for a lookup; then the platform's certificate
LOOKUP_BACKOFF = 5.0  # seconds without lookups after one failed (a database down or hung must
# not hold the listener's event loop for LOOKUP_TIMEOUT at every new name)
MAX_CACHED = 10_000  # names whose context is kept; beyond, the oldest are read again


def context_for_files(cert: str, key: str) -> ssl.SSLContext:
    """A server context with TLS 1.2 at least, as the listeners' own."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


def context_for_pems(chain: str, key: str) -> ssl.SSLContext:
    """As context_for_files, from PEM text (OpenSSL loads a chain from files only)."""
    with tempfile.TemporaryDirectory(prefix="maas-sni-") as where:
        cert_path, key_path = os.path.join(where, "tls.crt"), os.path.join(where, "tls.key")
        with open(cert_path, "w") as f:
            f.write(chain)
        with open(os.open(key_path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(key)
        return context_for_files(cert_path, key_path)


Lookup = Callable[[str], "tuple[str, str] | None"]  # host -> (chain PEM, key PEM), or None


class ServerNames:
    """The contexts of the space endpoints' host names, from `directory` or `lookup`."""

    def __init__(self, directory: str | None = None, lookup: Lookup | None = None):
        self.directory, self.lookup = directory, lookup
        self.cached: dict[str, tuple[float, float, ssl.SSLContext | None]] = {}
        self.tokens, self.refilled = LOOKUPS_PER_SECOND, time.monotonic()
        self.resting_until = 0.0  # after a failed lookup
        # The lookup may block (a database read) and must not run on an event loop's thread
        # (Django refuses): it runs on this one, the handshake waiting for it.
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sni-lookup") \
            if lookup is not None else None

    def install(self, context: ssl.SSLContext) -> ssl.SSLContext:
        """Makes `context` answer a known name with that name's certificate."""
        context.sni_callback = self._callback
        return context

    def _callback(self, tls, server_name, context):
        if server_name:
            chosen = self.context(server_name)
            if chosen is not None:
                tls.context = chosen
        return None  # go on: a name nobody has gets the listener's own certificate

    def context(self, server_name: str) -> ssl.SSLContext | None:
        name = server_name.lower().rstrip(".")
        if len(name) > 253 or not HOST.match(name):
            return None
        now = time.monotonic()
        cached = self.cached.get(name)
        if self.lookup is not None:
            return self._looked_up(name, now, cached)
        if cached is not None and now - cached[0] < RECHECK:
            return cached[2]
        cert = os.path.join(self.directory, name, "tls.crt")
        key = os.path.join(self.directory, name, "tls.key")
        try:
            mtime = max(os.stat(cert).st_mtime, os.stat(key).st_mtime)
        except OSError:
            self.cached.pop(name, None)
            return None
        if cached is not None and cached[1] == mtime:
            self.cached[name] = (now, mtime, cached[2])
            return cached[2]
        try:
            chosen = context_for_files(cert, key)
        except (OSError, ssl.SSLError, ValueError) as exc:  # half written, or not a pair
            logger.warning("server_names.unreadable", extra={"host": name, "error": str(exc)})
            chosen = None
        if len(self.cached) >= MAX_CACHED:
            self.cached.pop(next(iter(self.cached)))
        self.cached[name] = (now, mtime, chosen)
        return chosen

    def _looked_up(self, name: str, now: float, cached) -> ssl.SSLContext | None:
        if cached is not None and now - cached[0] < RECHECK_LOOKUP:
            return cached[2]
        self.tokens = min(LOOKUPS_PER_SECOND,
                          self.tokens + (now - self.refilled) * LOOKUPS_PER_SECOND)
        self.refilled = now
        if self.tokens < 1 or now < self.resting_until:
            return cached[2] if cached is not None else None  # over the rate: no lookup
        self.tokens -= 1
        try:
            found = self.pool.submit(self.lookup, name).result(timeout=LOOKUP_TIMEOUT)
            chosen = context_for_pems(*found) if found is not None else None
        except Exception as exc:  # noqa: BLE001 - a failed lookup serves the platform's
            logger.warning("server_names.lookup_failed", extra={"host": name,
                                                                "error": str(exc)})
            self.resting_until = time.monotonic() + LOOKUP_BACKOFF
            return cached[2] if cached is not None else None
        if len(self.cached) >= MAX_CACHED:
            self.cached.pop(next(iter(self.cached)))
        self.cached[name] = (now, 0.0, chosen)
        return chosen
