"""The test suite's own RabbitMQ node, maastest (deploy/local/rabbitmq-nodes.sh `test`): a real
broker like `make run`'s, apart from it, whose management statistics are emitted every second
and copied every 5 s (instead of 5 and 30 s), so that a test reads what it did through the
management API within about 6 s. maas/test_settings.py points every RabbitMQ setting at it."""
import os
import subprocess
from functools import cache
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "deploy" / "local" / "rabbitmq-nodes.sh"

# Its ports (deploy/local/rabbitmq-nodes.sh, node 9), as maas/test_settings.py sets them.
AMQP_PORT = int(os.environ.get("RABBITMQ_AMQP_PORT", "5689"))
MQTT_PORT = int(os.environ.get("RABBITMQ_MQTT_PORT", "1899"))
API_URL = os.environ.get("RABBITMQ_API_URL", "http://127.0.0.1:15689/api")
PROMETHEUS_PORT = 15709
# Its statistics: emitted every STATS_EMIT s (collect_statistics_interval), copied by the
# management agent every STATS_COPY s (sample_retention_policies); a figure read through the
# HTTP API shows a change up to their sum later (docs/storage.md, "Lag").
STATS_EMIT, STATS_COPY = 1.0, 5.0


def start() -> None:
    """Starts the node unless it runs; waits until it serves (about 10 s the first time)."""
    subprocess.run(["bash", str(SCRIPT), "test"], check=True, timeout=180,
                   stdout=subprocess.DEVNULL)


@cache
def node_name() -> str:
    """maastest@<host>, the host part the default node's name has."""
    host = subprocess.run(["rabbitmqctl", "-q", "eval", "node()."], check=True, timeout=60,
                          capture_output=True, text=True).stdout.strip().split("@", 1)[1]
    return f"maastest@{host}"


def rabbitmqctl(*args: str, timeout: float = 300) -> str:
    """rabbitmqctl on the test node; its output."""
    return subprocess.run(["rabbitmqctl", "-q", "-n", node_name(), *args], check=True,
                          timeout=timeout, capture_output=True, text=True).stdout
