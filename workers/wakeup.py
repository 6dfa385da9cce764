"""Redis wake-ups for agent processes that each serve one address space."""
import redis
from django.conf import settings

CHANNEL = "maas:space:{uid}"


def _client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5)


def publish(space_uid) -> None:
    _client().publish(CHANNEL.format(uid=space_uid), "changed")


def subscribe(space_uid):
    pubsub = _client().pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(CHANNEL.format(uid=space_uid))
    return pubsub
