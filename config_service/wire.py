"""The AMQP addresses a client uses for an address of its space: the address itself behind a
router (standard spaces), RabbitMQ's own syntax on a brokered space (docs/storage.md)."""


def amqp_queue(name: str) -> str:
    """RabbitMQ's AMQP 1.0 address of a queue: `/amq/queue/<name>`, a `/` in the name written
    `%2F`, the one escape RabbitMQ 3.10 decodes there (else it reads `/` as a separator and
    refuses the link); validation.stored_address refuses names holding `%2F` themselves."""
    return "/amq/queue/" + name.replace("/", "%2F")


def send_address(space_type: str, address_type: str, address: str) -> str:
    """Where to attach a sender. On RabbitMQ every address a client may send to has an
    exchange of its name (a queue's routes to the queue), the one target each user's rights
    are checked on; `/amq/queue/<name>` works only for users who may send everywhere."""
    if space_type == "standard":
        return address
    if "/" in address and address_type != "topic":
        # RabbitMQ 3.10 reads `/exchange/a/b` as exchange `a`, key `b`: a queue whose name
        # holds `/` is reached only through the default exchange (send pattern `*`).
        return amqp_queue(address)
    return f"/exchange/{address}"


def receive_address(space_type: str, address_type: str, address: str) -> str:
    """Where to attach a receiver: a topic's every message (`/exchange/<topic>/#`, a queue of
    the receiver's own), else the queue (subscriptions `<topic>::<name>` included)."""
    if space_type == "standard":
        return address
    if address_type == "topic":
        return f"/exchange/{address}/#"
    return amqp_queue(address)
