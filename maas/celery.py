"""The Celery app: fan-out of config events to agents, the outbox relay and periodic resync."""
import os

from celery import Celery
from celery.signals import setup_logging

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "maas.settings")

app = Celery("maas")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"])


@setup_logging.connect
def use_project_logging(**kwargs) -> None:
    """Celery would put its own handler and format on the root logger, and its format drops a
    record's `extra` fields (space, vhost, error): keep the project's JSON lines instead."""
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)
