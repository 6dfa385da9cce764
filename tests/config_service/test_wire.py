"""The AMQP addresses a client is told to use for each address of its space (config_service.wire,
shown on the portal's Connect page and used by `manage.py msg`)."""
import pytest

from config_service.wire import receive_address, send_address


@pytest.mark.parametrize("kind", ["queue", "topic", "anycast", "multicast", "subscription"])
def test_a_standard_space_uses_the_address_as_it_is(kind):
    assert send_address("standard", kind, "orders") == "orders"
    assert receive_address("standard", kind, "orders") == "orders"


def test_a_brokered_queue_is_sent_to_through_its_own_exchange_and_received_from_the_queue():
    assert send_address("brokered", "queue", "orders") == "/exchange/orders"
    assert receive_address("brokered", "queue", "orders") == "/amq/queue/orders"
    assert receive_address("brokered", "subscription", "news::s1") == "/amq/queue/news::s1"


def test_a_brokered_topic_is_sent_to_its_exchange_and_received_from_all_its_keys():
    assert send_address("brokered", "topic", "news") == "/exchange/news"
    assert receive_address("brokered", "topic", "news") == "/exchange/news/#"


def test_a_slash_in_a_brokered_name_is_escaped_not_read_as_a_key():
    # `/exchange/orders/eu` would be the exchange `orders` with the key `eu`; `%2F` is the `/`
    # RabbitMQ decodes in a segment (tests/storage/test_bare_addresses.py sends through it as
    # a user with rules for that queue alone).
    assert send_address("brokered", "queue", "orders/eu") == "/exchange/orders%2Feu"
    assert receive_address("brokered", "queue", "orders/eu") == "/amq/queue/orders%2Feu"
    assert send_address("brokered", "topic", "news/eu") == "/exchange/news%2Feu"
    assert receive_address("brokered", "topic", "news/eu") == "/exchange/news%2Feu/#"
