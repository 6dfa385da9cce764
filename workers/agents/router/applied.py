"""Digests of the vhost policy and connector the router agent last applied to each space, per
router, kept in Redis (a hash per space, a field per entity): the short path trusts them when
what it would apply is unchanged.

qdrouterd hands `vhost` and `connector` requests to its Python agent, which serves one request
at a time and first refreshes every entity it holds (agent.py, `refresh_from_c`): at 1,000
spaces a READ of one space's policy waited 100-250 ms, and every anycast create of every space
queued behind the others' READs there. A short path that finds the digest of its desired policy
recorded skips those READs; a throttle, user or plan change makes another digest, and the READs
(or a full diff) follow as before.

The record is dropped before a full diff sends anything and written after one that left the
space clean, so it never vouches for a policy a failed run may have half changed; and it counts
only on a management connection that applied or read that policy itself, which a router restart
ends (the next connection READs again). What it cannot see, an entity changed by hand, the next
drift check repairs, as for the addresses themselves. Redis unavailable: no record, the READs."""
import hashlib
import json

import redis

from workers.agents.router import touched
from workers.clients.qdr import Management

KEY_PREFIX = "maas:router:applied:"
KEPT_SECONDS = 3600  # then the next short path READs the policy again and records it anew


def digest(attributes: dict) -> str:
    """Of one entity's desired attributes: equal for equal attributes, in any order."""
    return hashlib.sha256(json.dumps(attributes, sort_keys=True, default=str).encode()).hexdigest()


def matches(mgmt: Management, prefix: str, policy: dict) -> bool:
    """True if each entity of `policy` ({(type, name): attributes}) is as the last clean run
    applied it to the space on that router, and this connection applied or read it so itself
    (a short path's policy holds only the entities its new addresses need: the vhost, and no
    connector without stored addresses). The connection's own word is what a router restart
    cannot outlive: the restart ends the connection, and the next one READs again."""
    if not policy:
        return True
    fields = {_field(prefix, key): digest(attributes) for key, attributes in policy.items()}
    if any(mgmt.applied_policy.get(f) != d for f, d in fields.items()):
        return False
    try:
        recorded = touched.client().hmget(_key(mgmt.url, prefix), list(fields))
    except redis.RedisError:
        return False
    return all(r is not None and r.decode() == d
               for r, d in zip(recorded, fields.values(), strict=True))


def record(mgmt: Management, prefix: str, policy: dict) -> None:
    """After a run on `mgmt` that left the space clean with `policy` applied."""
    if not policy:
        return
    fields = {_field(prefix, key): digest(attributes) for key, attributes in policy.items()}
    mgmt.applied_policy.update(fields)
    try:
        (touched.client().pipeline(transaction=False).hset(_key(mgmt.url, prefix), mapping=fields)
         .expire(_key(mgmt.url, prefix), KEPT_SECONDS).execute())
    except redis.RedisError:
        pass  # no record: the short path reads the policy


def forget(mgmt: Management, prefix: str) -> None:
    """Before a run that may change the policy; Unknown if Redis cannot drop the record (the
    run must not go on: the record could vouch for a policy it half changed)."""
    for field in [f for f in mgmt.applied_policy if f.startswith(prefix + "|")]:
        del mgmt.applied_policy[field]
    try:
        touched.client().delete(_key(mgmt.url, prefix))
    except redis.RedisError as exc:
        raise touched.Unknown(f"the record of applied router policies is unavailable: {exc}") \
            from exc


def _key(url: str, prefix: str) -> str:
    return f"{KEY_PREFIX}{url}|{prefix}"


def _field(prefix: str, key: tuple) -> str:
    return f"{prefix}|{key[0]}|{key[1]}"
