"""A digest of the vhost policy and connector the router agent last applied to each space, per
router, kept in Redis: the short path trusts them when what it would apply is unchanged.

qdrouterd hands `vhost` and `connector` requests to its Python agent, which serves one request
at a time and first refreshes every entity it holds (agent.py, `refresh_from_c`): at 1,000
spaces a READ of one space's policy waited 100-250 ms, and every anycast create of every space
queued behind the others' READs there. A short path that finds the digest of its desired policy
recorded skips those READs; a throttle, user or plan change makes another digest, and the READs
(or a full diff) follow as before.

The record is dropped before a full diff sends anything and written after one that left the
space clean, so it never vouches for a policy a failed run may have half changed. What it cannot
see, an entity changed by hand or a router restarted and not yet noticed by the watch, the next
drift check or the watch's restore repairs, as for the addresses themselves. Redis unavailable:
no record, the READs."""
import hashlib
import json

import redis

from workers.agents.router import touched

KEY_PREFIX = "maas:router:applied:"
KEPT_SECONDS = 3600  # then the next short path READs the policy again and records it anew


def digest(policy: dict) -> str:
    """Of {(type, name): attributes}: equal for equal desired entities, in any order."""
    text = json.dumps(sorted([list(key), attributes] for key, attributes in policy.items()),
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def matches(url: str, prefix: str, policy: dict) -> bool:
    """True if `policy` is what the last clean run applied to the space on that router."""
    try:
        recorded = touched.client().get(_key(url, prefix))
    except redis.RedisError:
        return False
    return recorded is not None and recorded.decode() == digest(policy)


def record(url: str, prefix: str, policy: dict) -> None:
    """After a run that left the space clean with `policy` applied."""
    try:
        touched.client().set(_key(url, prefix), digest(policy), ex=KEPT_SECONDS)
    except redis.RedisError:
        pass  # no record: the short path reads the policy


def forget(url: str, prefix: str) -> None:
    """Before a run that may change the policy; Unknown if Redis cannot drop the record (the
    run must not go on: the record could vouch for a policy it half changed)."""
    try:
        touched.client().delete(_key(url, prefix))
    except redis.RedisError as exc:
        raise touched.Unknown(f"the record of applied router policies is unavailable: {exc}") \
            from exc


def _key(url: str, prefix: str) -> str:
    return f"{KEY_PREFIX}{url}|{prefix}"
