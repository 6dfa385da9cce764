"""WSGI entry point (gunicorn maas.wsgi)."""
import os

from django.core.wsgi import get_wsgi_application

from maas.heap import freeze_startup_heap

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "maas.settings")
application = get_wsgi_application()
freeze_startup_heap()  # each gunicorn worker loads the application itself, after the fork
