"""Sends a space's pending events to its agents after commit: a Celery task, or a wake-up.

In "inline" mode the Celery worker runs the agents; in "process" mode one `run_agent` process
per address space waits on a Redis channel for the same wake-up. Either way the outbox relay
re-sends what was not acknowledged, so a lost message only delays a change.
"""
import logging

from django.conf import settings

logger = logging.getLogger(__name__)


def notify_space(space_uid) -> None:
    try:
        if settings.MAAS_AGENT_MODE == "process" or settings.MAAS_INFRA_BACKEND == "kubernetes":
            from .wakeup import publish

            publish(space_uid)  # run_agent processes (on Kubernetes: each space's agent pod)
        if settings.MAAS_AGENT_MODE != "process":
            from .tasks import reconcile_space

            reconcile_space.delay(str(space_uid))
    except Exception:  # broker down: the outbox relay will deliver it later
        logger.warning("fanout.deferred", extra={"space": str(space_uid)}, exc_info=True)
