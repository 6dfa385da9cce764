"""Who may read /metrics: a Prometheus that sends MAAS_METRICS_TOKEN, or, when no token is
set, a client on this machine only.

The figures name every tenant and address space, so they are not for whoever reaches the API
port. A request that came through a reverse proxy (it carries a forwarding header) is not
taken for a local one even from loopback: behind a proxy on the same host every client looks
local, so such a set-up needs the token.
"""
import functools
import hmac
import ipaddress
import logging

from django.conf import settings
from django.http import HttpResponse

logger = logging.getLogger(__name__)
REALM = "maas-metrics"
FORWARDING_HEADERS = ("HTTP_FORWARDED", "HTTP_X_FORWARDED_FOR", "HTTP_X_REAL_IP")


def is_loopback(address: str | None) -> bool:
    """True for 127.0.0.0/8 and ::1 (also as ::ffff:127.x.y.z); False for anything else."""
    try:
        ip = ipaddress.ip_address((address or "").strip())
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def _bearer(request) -> str:
    scheme, _, credentials = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else ""


def _refused(request, status: int, reason: str) -> HttpResponse:
    logger.info("metrics.refused", extra={"status": status, "reason": reason,
                                          "remote_addr": request.META.get("REMOTE_ADDR", "")})
    response = HttpResponse(f"{reason}\n", status=status, content_type="text/plain")
    if status == 401:
        response["WWW-Authenticate"] = f'Bearer realm="{REALM}"'
    return response


def refusal(request) -> HttpResponse | None:
    """The answer that refuses this scrape, or None when it may read the figures."""
    token = getattr(settings, "MAAS_METRICS_TOKEN", "") or ""
    if token:
        # Compared in constant time (as bytes: compare_digest takes ASCII-only strings).
        if not hmac.compare_digest(_bearer(request).encode(), token.encode()):
            return _refused(request, 401, "The metrics need Authorization: Bearer "
                                          "<MAAS_METRICS_TOKEN>.")
        return None
    forwarded = any(request.META.get(h) for h in FORWARDING_HEADERS)
    if forwarded or not is_loopback(request.META.get("REMOTE_ADDR")):
        return _refused(request, 403, "The metrics answer this machine only; set "
                                      "MAAS_METRICS_TOKEN to scrape them from elsewhere.")
    return None


def scrape_protected(view):
    """Decorates a view with refusal()."""

    @functools.wraps(view)
    def wrapped(request, *args, **kwargs):
        return refusal(request) or view(request, *args, **kwargs)

    return wrapped
