"""manage.py run_agent --space UID [--kind storage]: one agent process for one address space.

How Kubernetes runs agents: woken by Redis on each change, and resyncing on a timer, so a lost
wake-up (Redis restarted) only delays a change until the next resync or outbox relay.
"""
import logging
import time

from django.conf import settings
from django.core.management.base import BaseCommand

from workers.agents import runner
from workers.wakeup import subscribe

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Run the agents of one address space until it is removed."

    def add_arguments(self, parser):
        parser.add_argument("--space", required=True, help="address space uid")
        parser.add_argument("--kind", action="append", help="agent kind (default: all)")
        parser.add_argument("--resync", type=float, default=settings.MAAS_RESYNC_INTERVAL)

    def handle(self, space, kind, resync, **options):
        kinds = kind or list(runner.installed_agents())
        pubsub = None
        next_resync = 0.0
        while True:
            try:
                if pubsub is None:
                    pubsub = subscribe(space)
                due = time.monotonic() >= next_resync
                if due or pubsub.get_message(timeout=1.0):
                    for k in kinds:  # on the timer, a drift check
                        if runner.run(space, k, check=due) is None:
                            self.stdout.write(f"address space {space} is gone; stopping")
                            return
                    next_resync = time.monotonic() + resync
            except runner.TransientError:
                logger.warning("agent.retry", extra={"space": space}, exc_info=True)
                time.sleep(2)
            except Exception:  # Redis down: keep resyncing on the timer, reconnect later
                logger.warning("agent.wakeup_lost", extra={"space": space}, exc_info=True)
                pubsub = None
                time.sleep(2)
