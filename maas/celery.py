"""The Celery app: fan-out of config events to agents, the outbox relay and periodic resync."""
import os

from celery import Celery
from celery.signals import (
    setup_logging,
    task_postrun,
    task_prerun,
    worker_process_init,
    worker_ready,
)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "maas.settings")

app = Celery("maas")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"])


@task_prerun.connect
@task_postrun.connect
def close_old_connections(sender=None, **kwargs) -> None:
    """Around each task what Django does around each request: a connection past CONN_MAX_AGE,
    broken, or left in a transaction is closed; a sound one is kept (CELERY_DB_REUSE_MAX).
    Not for a task run eagerly, inside its caller's transaction."""
    if getattr(getattr(sender, "request", None), "is_eager", False):
        return
    from django.db import close_old_connections as close

    close()


@worker_ready.connect
@worker_process_init.connect
def freeze_heap(**kwargs) -> None:
    """Once a worker (its main process, then each pool process) has loaded the tasks and Django:
    collections no longer walk what start-up made (maas.heap)."""
    from maas.heap import freeze_startup_heap

    freeze_startup_heap()


@setup_logging.connect
def use_project_logging(**kwargs) -> None:
    """Celery would put its own handler and format on the root logger, and its format drops a
    record's `extra` fields (space, vhost, error): keep the project's JSON lines instead."""
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)
