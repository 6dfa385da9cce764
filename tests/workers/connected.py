"""Real clients of a standard space, shared by the connection tests of the API, the portal,
the browser and maasctl: a space with an anycast address `orders` and a messaging user `app`,
clients of it with a container id of their choice, and messages sent from one to another."""
import uuid

from proton import Message
from proton.reactor import Container
from proton.utils import BlockingConnection

from config_service import services
from tests.conftest import CTX, b64
from tests.router.conftest import pump_until
from tests.workers.conftest import sync

PASSWORD = "conn-password"


def standard_space(tenant, name: str | None = None, plan: str = "standard-medium",
                   spec: dict | None = None):
    """A standard space with `orders` (anycast) and `app` (send and receive everything),
    reconciled on the module's router; `spec`: more of its spec (endpoints)."""
    s = services.create_address_space(ctx=CTX, tenant=tenant,
                                      name=name or f"cx{uuid.uuid4().hex[:5]}",
                                      type="standard", plan=plan, spec=spec)
    services.create_address(ctx=CTX, space=s, address="orders", type="anycast",
                            plan="standard-small-anycast")
    services.create_messaging_user(
        ctx=CTX, space=s, username="app",
        authentication={"type": "password", "password": b64(PASSWORD)},
        authorization=[{"addresses": ["*"], "operations": ["send", "recv"]}])
    sync(s)
    return s


def connect(router, space, container_id: str) -> BlockingConnection:
    """A client of `space` as `app`, whose AMQP container id is `container_id`."""
    container = Container()
    container.container_id = container_id
    return BlockingConnection(f"amqp://127.0.0.1:{router.amqp_port}",
                              user=f"app@{space.vhost}", password=PASSWORD,
                              allowed_mechs="PLAIN", allow_insecure_mechs=True, timeout=5,
                              virtual_host=space.vhost, container=container)


def exchange(sending: BlockingConnection, receiving: BlockingConnection, count: int):
    """`count` messages from `sending` to `receiving` through `orders`, received and accepted;
    returns the (sender, receiver) links, still open."""
    receiver = receiving.create_receiver("orders", credit=10)
    sender = sending.create_sender("orders")
    pump_until(lambda: sender.link.credit > 0, sending, receiving)
    deliveries = [sender.link.send(Message(body=f"m{i}")) for i in range(count)]
    pump_until(lambda: len(receiver.fetcher.incoming) == count, sending, receiving)
    for i in range(count):
        assert receiver.receive(timeout=5).body == f"m{i}"
        receiver.accept()
    pump_until(lambda: all(d.settled for d in deliveries), sending, receiving)
    return sender, receiver


def round_trip(conn: BlockingConnection, body: str) -> None:
    """One message through `orders` on one connection: anycast settles end to end, so the
    sender does not wait for its settlement before the receiver takes it."""
    receiver = conn.create_receiver("orders", credit=10)
    sender = conn.create_sender("orders")
    conn.wait(lambda: sender.link.credit > 0, msg="credit for orders")
    sender.link.send(Message(body=body))
    assert receiver.receive(timeout=10).body == body
    receiver.accept()
