"""Marks of the vhosts whose objects the storage controller changed, kept in Django's cache
(Redis) for the usage sampler: a vhost marked since its queues and exchanges were last listed
is listed again in the next round, even though no message moved
(workers.usage.broker_counters.IdleVhosts).

A lost mark (Redis unreachable, or emptied) costs lateness only: every vhost is listed again
within broker_counters.RELIST_EVERY (an hour) anyway, and the counters are cumulative."""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from django.core.cache import cache

logger = logging.getLogger(__name__)

KEY_PREFIX = "maas:usage:vhost-changed:"
# Longer than the sampler's relisting period: a vhost not listed since its mark by then is
# listed again whatever the mark says.
KEPT_SECONDS = 2 * 3600


def _key(broker: str, vhost: str) -> str:
    return f"{KEY_PREFIX}{broker}|{vhost}"


def mark(broker: str, vhost: str) -> None:
    """Records that `vhost`'s objects on `broker` (its management API's base URL) changed by
    now."""
    try:
        cache.set(_key(broker, vhost), time.time(), timeout=KEPT_SECONDS)
    except Exception:
        logger.warning("usage.vhost_mark_lost", extra={"broker": broker, "vhost": vhost},
                       exc_info=True)


def marks(broker: str, vhosts: Iterable[str]) -> dict[str, float]:
    """{vhost: when it was last marked (Unix s)} of those of `vhosts` marked on `broker`, in
    one call; {} when the cache cannot be read."""
    keys = {_key(broker, v): v for v in vhosts}
    try:
        found = cache.get_many(list(keys))
    except Exception:
        logger.warning("usage.vhost_marks_unreadable", extra={"broker": broker}, exc_info=True)
        return {}
    return {keys[k]: float(t) for k, t in found.items()}
