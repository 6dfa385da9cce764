"""Celery tasks and the agents they drive: fan-out, outbox relay, resync, storage controller."""
