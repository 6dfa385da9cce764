"""The after-commit fan-out of a space's events to its agents, which the layer above registers.

`config_service` never imports `workers`: at start-up `workers` (workers/apps.py) registers
the function that wakes a space's agents. A process without it still commits every change; the
outbox relay then delivers the events.
"""
import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)

_notify: Callable[[object], None] | None = None


def register(notify: Callable[[object], None]) -> None:
    """Installs `notify(space_uid)`, called after commit for every space with new events."""
    global _notify
    _notify = notify


def notify_space(space_uid) -> None:
    if _notify is None:
        logger.warning("fanout.unregistered", extra={"space": str(space_uid)})
        return
    _notify(space_uid)
