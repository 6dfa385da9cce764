"""Settings for the test suite: the same as production's, on a Redis, a Celery queue and a
RabbitMQ node of their own so that tests never disturb a platform running on the same machine."""
import os

# Under pytest-xdist each worker process (gw0, gw1, ...) has a database (pytest-django adds the
# suffix), a Redis and a Celery queue of its own: a test may restart its Redis, and a Celery
# worker it starts must take only its own tasks. Set here, not defaulted: a worker inherits the
# environment of the process that started it, the xdist controller's included.
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:] or 0)
_REDIS_PORT = int(os.environ.get("MAAS_TEST_REDIS_BASE_PORT", "6390")) + _WORKER
os.environ["MAAS_TEST_REDIS_PORT"] = str(_REDIS_PORT)  # tests/conftest.py starts it
os.environ["REDIS_URL"] = os.environ["CELERY_BROKER_URL"] = f"redis://127.0.0.1:{_REDIS_PORT}/0"
os.environ["MAAS_CELERY_QUEUE"] = f"maas-test-{_WORKER}"

# The suite's own RabbitMQ node (tests/broker.py), apart from `make run`'s, with statistics
# read within seconds.
os.environ.setdefault("RABBITMQ_API_URL", "http://127.0.0.1:15689/api")
os.environ.setdefault("RABBITMQ_AMQP_PORT", "5689")
os.environ.setdefault("RABBITMQ_MQTT_PORT", "1899")
os.environ.setdefault("RABBITMQ_AMQPS_PORT", "5669")
os.environ.setdefault("RABBITMQ_MQTTS_PORT", "8879")
# No relay runs on make run's ports here: a brokered space's endpoints are RabbitMQ's own
# unless a test starts the relays and names their ports (tests/storage/relays.py).
os.environ.setdefault("MAAS_BROKERED_AMQP_PORT", "0")
os.environ.setdefault("MAAS_BROKERED_AMQPS_PORT", "0")
os.environ.setdefault("MAAS_MQTT_RELAY_TLS_PORT", "0")

from .settings import *  # noqa: E402,F401,F403

# Django login passwords are not what the tests exercise: hash them cheaply.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# A database name of its own per checkout or run (MAAS_TEST_DB), so parallel runs never collide.
DATABASES["default"]["TEST"] = {"NAME": os.environ.get("MAAS_TEST_DB", "test_maas")}  # noqa: F405
