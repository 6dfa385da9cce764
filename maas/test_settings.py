"""Settings for the test suite: the same as production's, on a Redis database and Celery queue
of their own so that tests never disturb a platform running on the same machine."""
import os

# A Redis of the tests' own (started by tests/conftest.py), which a test may restart.
os.environ.setdefault("MAAS_TEST_REDIS_PORT", "6390")
os.environ.setdefault("REDIS_URL", f"redis://127.0.0.1:{os.environ['MAAS_TEST_REDIS_PORT']}/0")
os.environ.setdefault("MAAS_CELERY_QUEUE", "maas-test")

from .settings import *  # noqa: E402,F401,F403

# Django login passwords are not what the tests exercise: hash them cheaply.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# A database name of its own per checkout or run (MAAS_TEST_DB), so parallel runs never collide.
DATABASES["default"]["TEST"] = {"NAME": os.environ.get("MAAS_TEST_DB", "test_maas")}  # noqa: F405
