"""The AMQP addresses a client uses for an address of its space: the address itself behind a
router (standard spaces), RabbitMQ's own syntax on a brokered space (docs/storage.md)."""
from .validation import ESCAPED_SLASH


def segment(name: str) -> str:
    """`name` as one segment of a RabbitMQ AMQP 1.0 address: a `/` in it written `%2F`, the
    one escape RabbitMQ 3.10 decodes there (else it reads `/` as a separator: `/exchange/a/b`
    is the exchange `a` with the key `b`); validation.stored_address refuses names holding
    `%2F` themselves. The brokered-amqp relay writes bare names the same way."""
    return name.replace("/", ESCAPED_SLASH)


def amqp_queue(name: str) -> str:
    """RabbitMQ's AMQP 1.0 address of a queue: `/amq/queue/<name>`."""
    return "/amq/queue/" + segment(name)


def send_address(space_type: str, address_type: str, address: str) -> str:
    """Where to attach a sender. On RabbitMQ every address a client may send to has an
    exchange of its name (a queue's routes to the queue), the one target each user's rights
    are checked on; `/amq/queue/<name>` works only for users who may send everywhere. (Through
    the brokered-amqp relay the address itself works too: it writes this.)"""
    if space_type == "standard":
        return address
    return f"/exchange/{segment(address)}"


def receive_address(space_type: str, address_type: str, address: str) -> str:
    """Where to attach a receiver: a topic's every message (`/exchange/<topic>/#`, a queue of
    the receiver's own), else the queue (subscriptions `<topic>::<name>` included)."""
    if space_type == "standard":
        return address
    if address_type == "topic":
        return f"/exchange/{segment(address)}/#"
    return amqp_queue(address)
