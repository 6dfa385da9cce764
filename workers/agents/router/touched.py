"""The router entities each space's runs were about to change, and when, kept in Redis for every
worker process: what a whole read of a shared router (tables.py) no longer tells.

Each run writes the keys of its DELETEs, UPDATEs and CREATEs here before it sends them and again
once they are answered (the later time counts: a request may land long after it was recorded),
so a diff that starts from tables read at some time reads by name, fresh, only the keys touched
since (`since`), and sees the router as it is now: a run that failed halfway, or ran in another
process, or created and then deleted an entity after the read, is covered the same way. Without
it a space changed after the read needed a whole read of its own (5 s at 20,000 addresses on
qdrouterd) while it held the space's turn.

A record Redis lost (restarted empty, flushed) is told by its epoch: tables keep the one they
were read under (`epoch`), and a record whose epoch is gone or another is not trusted."""
import secrets
import time

import redis
from django.conf import settings

from workers.agents.runner import TransientError

KEY_PREFIX = "maas:router:touched:"
EPOCH_PREFIX = "maas:router:touched-epoch:"
# Longer than any tables are used for (tables.SHARED_SECONDS, and a restore's snapshot) plus the
# clock skew between workers: a key touched before tables in use were read is dropped.
KEPT_SECONDS = 3600  # about 180 bytes of Redis per key: 43 MB after a 100,000-address fill
_SEP = "\n"  # between an entity's type and name in a member: neither holds a newline


class Unknown(TransientError):
    """Redis could not record or tell what was touched: trust no tables, and send no change
    (the run is retried later, as for a target down)."""


def record(url: str, prefix: str, keys) -> None:
    """Records that the space `prefix`'s entities `keys` ({(type, name)}) of the router at
    `url` change now; raises Unknown if Redis cannot keep it (the change must not be sent:
    tables elsewhere would not know of it)."""
    now = time.time()
    members = {f"{etype}{_SEP}{name}": now for etype, name in keys}
    if not members:
        return
    key = _key(url, prefix)
    try:
        (client().pipeline(transaction=False).zadd(key, members)
         .zremrangebyscore(key, "-inf", now - KEPT_SECONDS).expire(key, KEPT_SECONDS).execute())
    except redis.RedisError as exc:
        raise Unknown(f"the record of touched router entities is unavailable: {exc}") from exc


def since(url: str, prefix: str, began: float, epoch: str | None = None) -> set[tuple[str, str]]:
    """The keys of the space `prefix` touched at `began` (Unix s, the touching worker's clock)
    or later; Unknown if the record cannot be read, or is not the one of `epoch` (if given:
    Redis lost it since)."""
    try:
        members, current = (client().pipeline(transaction=False)
                            .zrangebyscore(_key(url, prefix), began, "+inf")
                            .get(EPOCH_PREFIX + url).execute())
    except redis.RedisError as exc:
        raise Unknown(f"the record of touched router entities is unavailable: {exc}") from exc
    if epoch is not None and (current is None or current.decode() != epoch):
        raise Unknown("the record of touched router entities was lost since the tables were read")
    return {tuple(m.decode().split(_SEP, 1)) for m in members}


def epoch(url: str) -> str:
    """The record's epoch for the router at `url`, begun now if Redis holds none: read before
    the tables it vouches for."""
    key = EPOCH_PREFIX + url
    try:
        store = client()
        store.set(key, secrets.token_hex(8), nx=True)
        value = store.get(key)
    except redis.RedisError as exc:
        raise Unknown(f"the record of touched router entities is unavailable: {exc}") from exc
    if value is None:  # emptied between the two calls
        raise Unknown("the record of touched router entities was lost as it began")
    return value.decode()


def _key(url: str, prefix: str) -> str:
    return f"{KEY_PREFIX}{url}|{prefix}"


_clients: dict = {}


def client() -> redis.Redis:
    """The Redis of the touch records and the stored tables (REDIS_URL)."""
    url = settings.REDIS_URL
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    return _clients[url]
