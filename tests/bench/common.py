"""What several benchmarks set up and tear down alike: a migrated database of their own, and
their Celery queues in Redis afterwards."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ensure_database(name: str) -> str:
    """The URL of database `name` on the local PostgreSQL, created and migrated if need be."""
    import psycopg

    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres",
                         autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    url = f"postgres://postgres@127.0.0.1:5432/{name}"
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, check=True,
                   env=dict(os.environ, DATABASE_URL=url))
    return url


def delete_queues(queue: str) -> None:
    """Drops the run's Celery queues and fan-out markers, so they do not pile up in Redis."""
    import redis

    url = os.environ.get("CELERY_BROKER_URL") or os.environ.get("REDIS_URL",
                                                                "redis://127.0.0.1:6379/0")
    client = redis.Redis.from_url(url)
    client.delete(queue, f"{queue}-resync", f"{queue}-usage")
    for key in client.scan_iter(f"maas:reconcile-pending:{queue}*"):
        client.delete(key)
