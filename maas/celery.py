"""The Celery app: fan-out of config events to agents, the outbox relay and periodic resync."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "maas.settings")

app = Celery("maas")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"])
