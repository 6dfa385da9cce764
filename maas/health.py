"""/healthz says the process serves; /readyz checks the database, Redis and each RabbitMQ of the
broker pool, whether a router's configuration is being restored (the router watch invalidated
some spaces), and under `make run` the platform's processes (maas.supervisor's state file): one
that keeps failing to start makes the platform not ready, by name."""
import json
import time
from pathlib import Path

import redis
import requests
from django.conf import settings
from django.db import connection
from django.http import JsonResponse

from workers import endpoints


def healthz(request):
    return JsonResponse({"status": "ok"})


def _database():
    with connection.cursor() as cursor:
        cursor.execute("select 1")


def _redis():
    redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2).ping()


def _rabbitmq(broker):
    """The broker serves: its node, or for a cluster any of its nodes (it serves with one
    gone; the others' quorum queues hold every message)."""
    failures = []
    for url in broker.api_urls:
        try:
            response = requests.get(f"{url}/aliveness-test/%2F",
                                    auth=(broker.api_user, broker.api_password), timeout=3)
            response.raise_for_status()
            if response.json().get("status") == "ok":
                return
            failures.append(response.text[:200])
        except requests.RequestException as exc:
            failures.append(f"{type(exc).__name__}: {exc}")
    raise RuntimeError("; ".join(failures))


def _processes():
    states = json.loads(Path(settings.MAAS_PROCESS_STATE_FILE).read_text())
    failing = sorted(name for name, state in states.items() if state.get("failing"))
    if failing:
        raise RuntimeError(f"failing to start: {', '.join(failing)} (see the platform's log)")


def _router_configuration():
    from config_service.models import AddressSpace, AgentState

    restoring = AgentState.objects.filter(
        kind="router", space_uid__in=AddressSpace.objects.values("uid")).exclude(
        invalidated="").count()
    if restoring:
        raise RuntimeError(f"router restarted: the configuration of {restoring} address "
                           f"space(s) is being restored")


def checks() -> dict:
    """Each broker of the pool is a check of its own: `rabbitmq`, then `rabbitmq-maas1`...;
    `processes` where a supervisor writes their state (MAAS_PROCESS_STATE_FILE)."""
    out = {"database": _database, "redis": _redis, "router": _router_configuration}
    if settings.MAAS_PROCESS_STATE_FILE:
        out["processes"] = _processes
    for broker in endpoints.broker_pool():
        out["-".join(filter(None, ("rabbitmq", broker.name)))] = (
            lambda broker=broker: _rabbitmq(broker))
    return out


def readyz(request):
    results, ready = {}, True
    for name, check in checks().items():
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
