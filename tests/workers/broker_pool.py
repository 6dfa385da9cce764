"""The second broker of the pool for the placement tests (test_broker_pool*.py): node maas1 of
deploy/local/rabbitmq-nodes.sh, a real RabbitMQ, and helpers to read any broker of the pool."""
import subprocess
from pathlib import Path

import requests

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "local" / "rabbitmq-nodes.sh"


def node1_name() -> str:
    """maas1 on the default node's host part (rabbitmq-env.conf may name it, as the script
    reads it)."""
    default = subprocess.run(["rabbitmqctl", "-q", "eval", "node()."], check=True, timeout=60,
                             capture_output=True, text=True).stdout.strip().strip("'")
    return f"maas1@{default.split('@', 1)[1]}"


def start_second() -> str:
    """maas1 running (started if it is not); its node name."""
    subprocess.run(["bash", str(SCRIPT), "start", "2"], check=True, timeout=300)
    return node1_name()


def stop_second() -> None:
    subprocess.run(["bash", str(SCRIPT), "stop", "2"], check=False, timeout=300)


def api(broker, path: str):
    return requests.get(f"{broker.api_url}{path}", auth=(broker.api_user, broker.api_password),
                        timeout=10)


def vhosts_on(broker) -> set[str]:
    return {v["name"] for v in api(broker, "/vhosts").json()}
