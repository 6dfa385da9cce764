"""Helpers to look at the tasks waiting in a Celery queue of the tests' Redis."""
import base64
import json

import redis
from django.conf import settings


def _client() -> redis.Redis:
    return redis.Redis.from_url(settings.CELERY_BROKER_URL)


def _messages(queue: str):
    """(headers, args, kwargs) of each message in the queue, oldest first."""
    for raw in reversed(_client().lrange(queue, 0, -1)):  # kombu pushes left, pops right
        message = json.loads(raw)
        args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
        yield message["headers"], args, kwargs


def waiting(queue: str, space_uid=None) -> list[tuple[str, list, dict]]:
    """(task name, args, kwargs) of each message in the queue, oldest first; only those of one
    space if `space_uid` is given."""
    return [(headers["task"], args, kwargs) for headers, args, kwargs in _messages(queue)
            if space_uid is None or args[:1] == [str(space_uid)]]


def etas(queue: str) -> dict[str, str | None]:
    """{first argument (a space's uid): the task's ETA, None if due at once} of each message."""
    return {args[0]: headers.get("eta") for headers, args, _ in _messages(queue)}


def take_all(queue: str) -> None:
    """Empties the queue, as a worker that took every task would."""
    _client().delete(queue)
