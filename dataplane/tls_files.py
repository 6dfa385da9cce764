"""TLS files that change under a running process, and the contexts made from them again.

On Kubernetes a certificate, key or CA bundle is a file of a mounted Secret, which the kubelet
replaces in place (an atomic swap of a symlinked directory) when the Secret changes: a rotated
internal CA's bundle, the auth service's re-signed certificate. A process that read the file once
would keep the old one until restarted; these re-read it once it changed, which a `stat` tells.
Sans Django; used by processes that never import each other (the auth service, the gateway).
"""
import logging
import os
import ssl
import time

logger = logging.getLogger("dataplane.tls_files")

RECHECK = 10.0  # seconds between looks at the files


def stamp(*paths: str) -> tuple:
    """What changes when any of the files does (through symlinks: the kubelet's swap)."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append(None)
            continue
        out.append((st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(out)


class ClientContext:
    """A client context that trusts the CA bundle `ca`, made again when the file changes, so
    a CA dropped from the bundle is no longer trusted either. `check_hostname`: the peer's
    certificate must name the host connected to."""

    def __init__(self, ca: str, check_hostname: bool = False, clock=time.monotonic):
        self.ca, self.check_hostname, self.clock = ca, check_hostname, clock
        self._stamp, self._next = stamp(ca), 0.0
        self._context = self._make()

    def _make(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca)
        context.check_hostname = self.check_hostname
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context

    def get(self) -> ssl.SSLContext:
        now = self.clock()
        if now >= self._next:
            self._next = now + RECHECK
            current = stamp(self.ca)
            if current != self._stamp:
                try:
                    self._context, self._stamp = self._make(), current
                    logger.info("tls.ca_reloaded", extra={"ca": self.ca})
                except (OSError, ssl.SSLError) as exc:  # mid-swap: the next look retries
                    logger.warning("tls.ca_unreadable", extra={"ca": self.ca,
                                                               "error": str(exc)})
        return self._context


class ServerCertificate:
    """A server context's certificate and key, loaded into it again when their files change
    (new connections get the new one; those open keep theirs)."""

    def __init__(self, context: ssl.SSLContext, cert: str, key: str):
        self.context, self.cert, self.key = context, cert, key
        self._stamp = stamp(cert, key)

    def reload_if_changed(self) -> bool:
        current = stamp(self.cert, self.key)
        if current == self._stamp:
            return False
        try:
            self.context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:  # a pair caught mid-swap: keep the old one
            logger.warning("tls.certificate_unreadable", extra={"cert": self.cert,
                                                                "error": str(exc)})
            return False
        self._stamp = current
        logger.info("tls.certificate_reloaded", extra={"cert": self.cert})
        return True
