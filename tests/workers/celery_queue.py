"""Helpers to look at the tasks waiting in a Celery queue of the tests' Redis."""
import base64
import json

import redis
from django.conf import settings


def _client() -> redis.Redis:
    return redis.Redis.from_url(settings.CELERY_BROKER_URL)


def waiting(queue: str, space_uid=None) -> list[tuple[str, list, dict]]:
    """(task name, args, kwargs) of each message in the queue, oldest first; only those of one
    space if `space_uid` is given."""
    tasks = []
    for raw in reversed(_client().lrange(queue, 0, -1)):  # kombu pushes left, pops right
        message = json.loads(raw)
        args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
        if space_uid is None or args[:1] == [str(space_uid)]:
            tasks.append((message["headers"]["task"], args, kwargs))
    return tasks


def etas(queue: str) -> dict[str, str | None]:
    """{first argument (a space's uid): the task's ETA, None if due at once} of each message."""
    due = {}
    for raw in _client().lrange(queue, 0, -1):
        message = json.loads(raw)
        args, _, _ = json.loads(base64.b64decode(message["body"]))
        due[args[0]] = message["headers"].get("eta")
    return due


def take_all(queue: str) -> None:
    """Empties the queue, as a worker that took every task would."""
    _client().delete(queue)
