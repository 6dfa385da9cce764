"""The broker's topic exchange type is asked once an hour for every worker, and a broker too
busy to answer when the hour is up leaves the last answer in use (real RabbitMQ, real Redis).

RabbitMQ's `/api/overview`, where the answer came from, took 26 s at 500 busy vhosts (it is
read from `/api/nodes` now, which a busy broker can still fail to answer); with an answer that
expired from the cache after the hour, every worker without one of its own
failed its applies until the broker answered again (enough to stall a 100,000-address fill).
"""
import time

import pytest

from tests.faults import HttpFaultProxy
from workers.agents.storage import agent as controller
from workers.agents.storage import rabbitmq
from workers.agents.storage import rabbitmq_reconciler as reconciler

from .clients import API_PASSWORD, API_URL, API_USER


@pytest.fixture
def broker(redis_server):
    """The broker's API behind a relay that can fail its GETs (a URL of this test's own, so
    its cached answer is too); this process knows no answer of its own yet, as a new worker."""
    proxy = HttpFaultProxy(API_URL)
    api = rabbitmq.RabbitMQApi(proxy.url, API_USER, API_PASSWORD, timeout=10)
    reconciler._topic_types.clear()
    yield proxy, api
    reconciler._topic_types.clear()
    api.close()
    proxy.close()


def test_the_last_answer_stands_when_the_broker_does_not_answer_after_the_hour(
        broker, monkeypatch):
    proxy, api = broker
    monkeypatch.setattr(controller, "TOPIC_KIND_TTL", 1)  # "the hour": one second here
    assert controller.topic_kind(api) == "x-maas-topic"  # services.sh enables the plugin
    assert proxy.seen == ["GET /nodes?columns=name%2Cexchange_types"]

    assert controller.topic_kind(api) == "x-maas-topic"  # within the hour: not asked again
    assert len(proxy.seen) == 1

    time.sleep(1.2)  # the hour is up
    reconciler._topic_types.clear()  # a worker started since
    proxy.fail_methods = {"GET"}  # the broker is busy
    assert controller.topic_kind(api) == "x-maas-topic"
    # a failed read is asked three times more (workers/clients/rabbitmq_api.py)
    assert proxy.failed == ["GET /nodes?columns=name%2Cexchange_types"] * 4

    proxy.fail_methods = set()  # it answers again: asked, and kept for another hour
    assert controller.topic_kind(api) == "x-maas-topic"
    assert len(proxy.seen) == 6


def test_with_no_answer_yet_a_busy_broker_fails_the_apply_as_transient(broker):
    proxy, api = broker
    proxy.fail_methods = {"GET"}
    with pytest.raises(rabbitmq.BrokerError) as error:
        controller.topic_kind(api)
    assert error.value.transient


def test_a_bare_answer_kept_by_an_earlier_release_is_asked_again_or_used(broker):
    from django.core.cache import cache

    proxy, api = broker
    key = controller.topic_kind_key(api)
    cache.set(key, "topic", 60)  # the earlier form: the kind alone, with an expiry
    proxy.fail_methods = {"GET"}
    assert controller.topic_kind(api) == "topic"  # the broker is busy: the last answer
    proxy.fail_methods = set()
    assert controller.topic_kind(api) == "x-maas-topic"  # asked, and kept in the new form
    assert cache.get(key)[0] == "x-maas-topic"
