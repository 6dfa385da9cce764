"""A TLS listener's certificate chosen by the name the client asks for (SNI): the certificate
of the space endpoint that has that host name, else the listener's own (the platform's).

The workers write each endpoint's certificate chain and key as `<directory>/<host>/tls.crt`
and `tls.key` (workers/certificates.py); every data-plane process with a tenant-facing TLS
listener (the embedded router, the MQTT gateway, the brokered spaces' relays) installs
`ServerNames(directory).install(context)` on its context. A file is read when a name is first
asked for and again once it changed (looked at most every `RECHECK` seconds per name); names
with no directory cost one `stat`. Sans Django; used by processes that never import each other.
"""
import logging
import os
import re
import ssl
import time

logger = logging.getLogger("dataplane.server_names")

HOST = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")
RECHECK = 5.0  # seconds between looks at a name's files
MAX_CACHED = 10_000  # names whose context is kept; beyond, the oldest are read again


def context_for_files(cert: str, key: str) -> ssl.SSLContext:
    """A server context with TLS 1.2 at least, as the listeners' own."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


class ServerNames:
    """The contexts of the space endpoints' host names, from `directory`."""

    def __init__(self, directory: str):
        self.directory = directory
        self.cached: dict[str, tuple[float, float, ssl.SSLContext | None]] = {}

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
