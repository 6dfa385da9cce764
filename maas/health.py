"""/healthz says the process serves; /readyz checks the database, Redis and RabbitMQ."""
import time

import redis
import requests
from django.conf import settings
from django.db import connection
from django.http import JsonResponse


def healthz(request):
    return JsonResponse({"status": "ok"})


def _database():
    with connection.cursor() as cursor:
        cursor.execute("select 1")


def _redis():
    redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2).ping()


def _rabbitmq():
    response = requests.get(
        f"{settings.RABBITMQ_API_URL}/aliveness-test/%2F",
        auth=(settings.RABBITMQ_API_USER, settings.RABBITMQ_API_PASSWORD),
        timeout=3,
    )
    response.raise_for_status()
    if response.json().get("status") != "ok":
        raise RuntimeError(response.text[:200])


CHECKS = {"database": _database, "redis": _redis, "rabbitmq": _rabbitmq}


def readyz(request):
    results, ready = {}, True
    for name, check in CHECKS.items():
        started = time.monotonic()
        try:
            check()
            results[name] = {"status": "ok"}
        except Exception as exc:  # each failure is reported, not raised
            ready = False
            results[name] = {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:300]}
        results[name]["seconds"] = round(time.monotonic() - started, 4)
    return JsonResponse({"status": "ok" if ready else "unavailable", "checks": results},
                        status=200 if ready else 503)
