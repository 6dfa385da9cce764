"""Settings for the test suite: the same as production's, on a Redis database and Celery queue
of their own so that tests never disturb a platform running on the same machine."""
import os

os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("MAAS_CELERY_QUEUE", "maas-test")

from .settings import *  # noqa: E402,F401,F403

# Django login passwords are not what the tests exercise: hash them cheaply.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
