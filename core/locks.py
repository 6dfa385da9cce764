"""PostgreSQL advisory locks: one holder at a time across every process of the platform."""
from contextlib import contextmanager

from django.db import connection


@contextmanager
def advisory_lock(key: int):
    """A session-level advisory lock on `key`, let go when the block ends or the process's
    connection drops (a killed process holds nothing)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [key])
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
