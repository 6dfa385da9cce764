"""Shared fixtures of the storage tests: a plain management API client of the real broker."""
import pytest

from workers.agents.storage.rabbitmq import RabbitMQApi

from .clients import API_PASSWORD, API_URL, API_USER


@pytest.fixture(scope="module")
def admin():
    """A plain client for setting up and inspecting the broker (a module may define its own)."""
    client = RabbitMQApi(API_URL, API_USER, API_PASSWORD, timeout=10)
    client.request("GET", "/overview")  # the set-up starts RabbitMQ: unreachable is a failure
    yield client
    client.close()
