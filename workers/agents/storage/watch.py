"""The broker watch: notices a RabbitMQ that restarted and has the storage controller make again
what the restart dropped.

MaaS's exchanges are transient (rabbitmq_objects: durability): a broker restart drops them and
their bindings, and keeps every queue with its messages. One tick (`tick`, run by Celery beat
every MAAS_BROKER_WATCH_INTERVAL) watches each broker of the pool (workers.endpoints.broker_pool):
every space on one machine, the brokered spaces on Kubernetes (a standard space's own brokers
there are repaired by its agent's timed resync). For each broker it

1. reads a transient marker exchange the watch left on the broker, `$maas.watch` in the vhost
   MAAS_BROKER_WATCH_VHOST: there, nothing was dropped since the last tick;
2. missing (the broker started since, or no watch ever ran): invalidates the storage state of
   every space placed on that broker in one UPDATE (the API shows their topics and queues
   Configuring, "Broker restarted; configuration being restored"), then leaves the marker again;

then it queues a reconcile, in the resync queue and only for the agents behind, of every space
whose storage state is invalidated; an invalidated state makes it a thorough one.

The invalidated rows are the work list: a tick that dies midway is carried on by the next, and
the resync queues them too (workers.tasks.resync_candidates). A broker that did not restart
costs one GET and one indexed query per tick.
"""
import logging
from dataclasses import dataclass
from urllib.parse import quote

from django.conf import settings

from config_service.models import AddressSpace, AgentState
from workers import dispatch, endpoints
from workers.agents import runner
from workers.agents.storage.agent import management_api
from workers.agents.storage.rabbitmq import BrokerError

logger = logging.getLogger(__name__)

KIND = "storage"
RESTORING = "Broker restarted; configuration being restored"
MARKER = "$maas.watch"  # `$maas.`: never an address's name, never granted to a tenant


@dataclass
class Tick:
    """What one tick saw and did."""

    reachable: bool = False
    restarted: bool = False
    invalidated: int = 0  # storage states newly marked not applied
    queued: int = 0  # reconciles queued for invalidated states


def tick() -> Tick:
    """Checks each broker of the pool for a restart, then queues the repair of what is
    invalidated."""
    result = Tick()
    for broker in endpoints.broker_pool():
        seen = detect(broker)
        if seen is not None:  # else the broker is down: a reconcile would only fail
            result.reachable = True
            restarted, invalidated = seen
            result.restarted |= restarted
            result.invalidated += invalidated
    if result.reachable:
        result.queued = queue_restores()
    return result


def detect(broker: endpoints.BrokerEndpoint) -> tuple[bool, int] | None:
    """(restarted, storage states invalidated), or None if the broker cannot be read."""
    api, vhost = management_api(broker), settings.MAAS_BROKER_WATCH_VHOST
    path = f"/exchanges/{_quote(vhost)}/{_quote(MARKER)}"
    try:
        if api.request("GET", path, missing_ok=True, timeout=5.0) is not None:
            return False, 0
        if api.get_vhost(vhost) is None:  # no place for the marker: telling nothing, doing none
            logger.error("broker.watch_vhost_missing", extra={"broker": broker.api_url,
                                                              "vhost": vhost})
            return None
        # Invalidated first, marker after: a tick that dies between the two invalidates again
        # next time (harmless), never leaves a marker over states that were not invalidated.
        invalidated = _invalidate(_spaces_on(broker))
        api.put_exchange(vhost, MARKER, "fanout", {}, durable=False)
    except BrokerError as exc:
        logger.info("broker.watch_failed", extra={"broker": broker.api_url, "error": str(exc)})
        return None
    logger.warning("broker.restarted", extra={"broker": broker.api_url, "spaces": invalidated})
    return True, invalidated


def _spaces_on(broker: endpoints.BrokerEndpoint):
    """The uids (a queryset, or a list with MAAS_SPACE_ENDPOINTS) of the spaces on `broker`,
    a broker of the pool."""
    spaces = AddressSpace.objects.all()
    if getattr(settings, "MAAS_SPACE_ENDPOINTS", ""):
        return [s.uid for s in spaces if endpoints.of(s).broker.api_url == broker.api_url]
    if settings.MAAS_INFRA_BACKEND == "kubernetes":
        spaces = spaces.exclude(type="standard")
    return spaces.filter(broker=broker.name).values("uid")


def _invalidate(space_uids) -> int:
    """Marks the storage state of those spaces as not applied; how many were applied."""
    states = AgentState.objects.filter(kind=KIND, torn_down=False, space_uid__in=space_uids)
    return runner.invalidate(KIND, states, RESTORING)


def queue_restores() -> int:
    """Queues a reconcile of every space whose storage state is invalidated (one already
    waiting is not queued twice); how many were queued."""
    if settings.MAAS_AGENT_MODE == "process":
        return 0  # woken when invalidated (_invalidate); each resyncs on its timer too
    return sum(dispatch.queue_reconcile(uid, resync=True, only_behind=True)
               for uid in runner.invalidated_spaces(KIND))


def _quote(part: str) -> str:
    return quote(part, safe="")
