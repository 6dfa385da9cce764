"""Live stats for the addresses table: router counters, broker queue depth, rates.

The counters come through the registered data plane (config_service/readings.py). Rates are
messages per second between this reading and the previous one, kept in the cache (Redis), so
any web process computes the same rate.
"""
import time

from django.core.cache import cache

from .. import readings


def address_stats(space, addresses) -> dict:
    """{address name: {in_rate, out_rate, stored, senders, receivers}} for the given rows."""
    counters = readings.get().address_counters(space)
    router, broker = counters.router, counters.broker
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
