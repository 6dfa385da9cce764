"""Live stats for the addresses table: router counters, broker queue depth, rates.

Rates are messages per second between this reading and the previous one, kept in the cache
(Redis), so any web process computes the same rate.
"""
import logging
import time
from urllib.parse import quote

from django.conf import settings
from django.core.cache import cache

logger = logging.getLogger(__name__)


def _router_rows(vhost: str) -> dict:
    from workers.agents.qdr import Management, RouterUnreachable

    try:
        mgmt = Management(settings.MAAS_ROUTER_MANAGEMENT_URL, settings.MAAS_ROUTER_ADMIN_USER,
                          settings.MAAS_ROUTER_ADMIN_PASSWORD, timeout=3)
    except RouterUnreachable:
        return {}
    try:
        rows = mgmt.query("org.apache.qpid.dispatch.router.address")
        links = mgmt.query("org.apache.qpid.dispatch.router.link")
        # Links to brokers (autoLinks, routed links) are not the tenant's senders/receivers.
        internal = {str(c["identity"]) for c in mgmt.query("org.apache.qpid.dispatch.connection")
                    if c.get("role") == "route-container"}
    except Exception:  # a stats page must not fail on a busy router
        logger.warning("portal.router_stats_failed", exc_info=True)
        return {}
    finally:
        mgmt.close()
    out: dict = {}
    prefix = f"{vhost}/"
    for row in rows:
        key = str(row.get("address", ""))
        if not key.startswith(prefix):
            continue
        s = out.setdefault(key[len(prefix):], {"in": 0, "out": 0, "senders": 0, "receivers": 0})
        if int(row.get("phase", 0)) == 0:
            s["in"] += int(row.get("deliveriesIngress", 0))
        if int(row.get("phase", 0)) == 1 or not row.get("containerCount"):
            s["out"] += int(row.get("deliveriesEgress", 0))
    for link in links:
        key = str(link.get("owningAddr", ""))
        if str(link.get("connectionId")) in internal:
            continue
        if key.startswith(prefix) and key[len(prefix):] in out:
            side = "receivers" if link.get("linkDir") == "out" else "senders"
            out[key[len(prefix):]][side] += 1
    return out


def _broker_rows(vhost: str) -> dict:
    import requests

    try:
        response = requests.get(
            f"{settings.RABBITMQ_API_URL}/queues/{quote(vhost, safe='')}",
            params={"columns": "name,messages,consumers,message_stats.publish,"
                               "message_stats.deliver_get"},
            auth=(settings.RABBITMQ_API_USER, settings.RABBITMQ_API_PASSWORD), timeout=3)
        if response.status_code == 404:  # the vhost is not made yet (space Configuring)
            return {}
        response.raise_for_status()
    except Exception:
        logger.warning("portal.broker_stats_failed", exc_info=True)
        return {}
    return {q["name"]: q for q in response.json()}


def address_stats(space, addresses) -> dict:
    """{address name: {in_rate, out_rate, stored, senders, receivers}} for the given rows."""
    router = _router_rows(space.vhost) if space.type == "standard" else {}
    broker = _broker_rows(space.vhost)
    now = time.time()
    out = {}
    for a in addresses:
        wire = a.broker_object_name
        r = router.get(wire, {})
        q = broker.get(wire, {})
        stats = q.get("message_stats") or {}
        count_in = r.get("in", stats.get("publish", 0) or 0)
        count_out = r.get("out", stats.get("deliver_get", 0) or 0)
        key = f"portal:rate:{space.uid}:{wire}"
        previous = cache.get(key)
        cache.set(key, (now, count_in, count_out), 600)
        in_rate = out_rate = 0.0
        if previous and now > previous[0]:
            dt = now - previous[0]
            in_rate = max(count_in - previous[1], 0) / dt
            out_rate = max(count_out - previous[2], 0) / dt
        out[a.name] = {
            "address": a.address, "in_rate": round(in_rate, 1), "out_rate": round(out_rate, 1),
            "messages_in": count_in, "messages_out": count_out,
            "stored": q.get("messages"),
            "senders": r.get("senders", 0),
            "receivers": r.get("receivers", q.get("consumers", 0) or 0),
        }
    return out
