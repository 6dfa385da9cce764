"""WSGI entry point (gunicorn maas.wsgi)."""
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "maas.settings")
application = get_wsgi_application()
