"""send and receive as a messaging user, over AMQP 1.0 (python-qpid-proton) or MQTT (paho),
at the endpoints the address space reports in `status.endpointStatuses`.

A standard space is reached through its router: the address as it is, the AMQP open hostname
set to the endpoint's `virtualHost`. A brokered space is RabbitMQ (through the brokered-amqp
relay, which takes these forms as they are), with its own address syntax, a `/` in a name
written `%2F`: a queue (or deadletter) is sent to through its own exchange `/exchange/<name>` (the one
target a user's send right is checked on) and received from `/amq/queue/<name>`, like a
subscription; a topic is sent to `/exchange/<topic>` (the subject, if any, is the routing key)
and received from `/exchange/<topic>/#` (every message) or `/exchange/<topic>/<key>` for
`<topic>/<key>`.
"""
import json
import sys
import threading
import time
import uuid
from dataclasses import dataclass

from .client import Client
from .errors import ApiError, CliError, TimedOut, Unreachable, UsageError


@dataclass
class Endpoint:
    host: str
    port: int
    username: str  # the login to send: the endpoint's template with the user filled in
    virtual_host: str | None
    space_type: str


def endpoint(space: dict, protocol: str, user: str) -> Endpoint:
    """Where and as whom to connect, from the space's `status.endpointStatuses`."""
    name = space["metadata"]["name"]
    for e in (space.get("status") or {}).get("endpointStatuses") or []:
        for port in e.get("servicePorts") or []:
            if port.get("name") == protocol:
                template = e.get("username") or "<username>"
                return Endpoint(e.get("serviceHost"), int(port["port"]),
                                template.replace("<username>", user), e.get("virtualHost"),
                                (space.get("spec") or {}).get("type", ""))
    raise CliError(f'address space "{name}" has no {protocol} endpoint')


def address_type(client: Client, tenant: str, space: str, address: str) -> tuple[str, str]:
    """(type, the address the name belongs to): `news/sports` belongs to the topic `news`."""
    candidates = [address, address.split("/", 1)[0]]
    path = f"tenants/{tenant}/addressspaces/{space}/addresses/"
    for name in dict.fromkeys(candidates):
        for item in client.items(path, {"search": name}):
            spec = item.get("spec") or {}
            if spec.get("address") == name:
                return spec.get("type", ""), name
    raise ApiError(404, f'address "{address}" not found in address space "{space}"')


def wire_address(space_type: str, kind: str, owner: str, address: str, receiving: bool) -> str:
    """The AMQP address to attach to (see the module's docstring). RabbitMQ's own forms, which
    its port and the brokered-amqp relay both take; a `/` in a name is written `%2F`, the one
    escape RabbitMQ decodes within a segment (`/exchange/a/b` is exchange `a`, key `b`)."""
    if space_type != "brokered":
        return address
    if kind == "topic":
        key = address[len(owner) + 1:] if address != owner else ""
        if receiving:
            return f"/exchange/{_segment(owner)}/{key or '#'}"
        return f"/exchange/{_segment(owner)}/{key}" if key else f"/exchange/{_segment(owner)}"
    if receiving:
        return f"/amq/queue/{_segment(address)}"
    return f"/exchange/{_segment(address)}"


def _segment(name: str) -> str:
    return name.replace("/", "%2F")


def _text(body) -> str:
    if isinstance(body, bytes | memoryview):
        return bytes(body).decode("utf-8", "replace")
    if isinstance(body, str):
        return body
    return json.dumps(body, default=str)


def emit(body, subject=None, properties=None, as_json: bool = False) -> None:
    if as_json:
        print(json.dumps({"body": _text(body), "subject": subject,
                          "properties": properties or {}}, default=str))
    else:
        print(_text(body))
    sys.stdout.flush()


# AMQP 1.0 -----------------------------------------------------------------------------------

def _amqp_connection(ep: Endpoint, password: str, timeout: float):
    from proton import ConnectionException
    from proton.utils import BlockingConnection

    try:
        return BlockingConnection(f"amqp://{ep.host}:{ep.port}", user=ep.username,
                                  password=password, virtual_host=ep.virtual_host,
                                  allowed_mechs="PLAIN", allow_insecure_mechs=True,
                                  timeout=timeout)
    except ConnectionException as exc:
        text = str(exc)
        if "refused" in text.lower() and "sasl" not in text.lower():
            raise Unreachable(f"cannot reach amqp://{ep.host}:{ep.port}: {text}") from None
        raise CliError(f"AMQP connection to {ep.host}:{ep.port} as {ep.username} failed: "
                       f"{text}") from None


def _links():
    """Blocking links that accept the router's vhost-qualified echo: qdrouterd under
    `multiTenant` answers a link-routed attach (a topic) with the address qualified by the vhost
    (`<vhost>/news` for `news`), which proton's blocking API would take for a refusal."""
    from proton import LinkException
    from proton._utils import BlockingLink, BlockingReceiver, BlockingSender, Fetcher

    def check(link: BlockingLink, asked: str, answered: str | None) -> None:
        if answered is not None and (answered == asked or answered.endswith("/" + asked)):
            return
        link._waitForClose()  # the peer may follow with a detach that carries the reason
        link.link.close()
        raise LinkException(f"the peer refused the address {asked}")

    class Sender(BlockingSender):
        def __init__(self, conn, address: str):
            BlockingLink.__init__(self, conn, conn.container.create_sender(conn.conn, address))
            check(self, address, self.link.remote_target.address)

    class Receiver(BlockingReceiver):
        def __init__(self, conn, address: str, credit: int):
            self.fetcher = Fetcher(conn, credit)
            BlockingLink.__init__(self, conn, conn.container.create_receiver(
                conn.conn, address, handler=self.fetcher))
            check(self, address, self.link.remote_source.address)
            self.link.flow(credit)
            self.container = conn.container

    return Sender, Receiver


def amqp_send(ep: Endpoint, password: str, address: str, bodies: list[str],
              subject: str | None, timeout: float) -> None:
    from proton import ConnectionException, LinkException, Message, Timeout

    conn = _amqp_connection(ep, password, timeout)
    try:
        sender = _links()[0](conn, address)
        for body in bodies:
            # Durable: a queue keeps it through a broker restart. `send` waits for the
            # disposition and raises unless the message was accepted.
            sender.send(Message(body=body, subject=subject, durable=True), timeout=timeout)
    except Timeout:
        raise TimedOut(f"no acknowledgement from {address} within {timeout:g}s") from None
    except (LinkException, ConnectionException) as exc:
        raise CliError(f"sending to {address} failed: {exc}") from None
    finally:
        _close(conn)


def amqp_receive(ep: Endpoint, password: str, address: str, count: int, timeout: float,
                 as_json: bool) -> int:
    from proton import ConnectionException, LinkException, Timeout

    conn = _amqp_connection(ep, password, timeout)
    got = 0
    try:
        receiver = _links()[1](conn, address, credit=min(count, 100))
        deadline = time.monotonic() + timeout
        while got < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout()
            message = receiver.receive(left)
            if receiver.fetcher.unsettled:  # multicast copies may come pre-settled
                receiver.accept()
            emit(message.body, message.subject, message.properties, as_json)
            got += 1
    except Timeout:
        raise TimedOut(f"received {got} of {count} message(s) from {address} within "
                       f"{timeout:g}s") from None
    except (LinkException, ConnectionException) as exc:
        raise CliError(f"receiving from {address} failed: {exc}") from None
    finally:
        _close(conn)
    return got


def _close(conn) -> None:
    from proton import ConnectionException, Timeout

    try:
        conn.close()
    except (ConnectionException, Timeout):
        pass


# MQTT ---------------------------------------------------------------------------------------

def _mqtt_client(ep: Endpoint, password: str, timeout: float, on_message=None):
    import paho.mqtt.client as mqtt

    connected = threading.Event()
    result: dict = {}
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2,
                         client_id=f"maasctl-{uuid.uuid4().hex[:12]}", clean_session=True)
    client.username_pw_set(ep.username, password)

    def on_connect(c, userdata, flags, reason_code, properties):
        result["rc"] = reason_code
        connected.set()

    def on_disconnect(c, userdata, flags, reason_code, properties):
        result.setdefault("rc", reason_code)
        result["lost"] = reason_code
        connected.set()

    client.on_connect, client.on_disconnect = on_connect, on_disconnect
    if on_message is not None:
        client.on_message = on_message
    try:
        client.connect(ep.host, ep.port, keepalive=30)
    except OSError as exc:
        raise Unreachable(f"cannot reach mqtt://{ep.host}:{ep.port}: {exc}") from None
    client.loop_start()
    if not connected.wait(timeout):
        client.loop_stop()
        raise TimedOut(f"no MQTT CONNACK from {ep.host}:{ep.port} within {timeout:g}s")
    if result["rc"].is_failure:
        client.loop_stop()
        raise CliError(f"MQTT connection to {ep.host}:{ep.port} as {ep.username} refused: "
                       f"{result['rc']}")
    return client, result


def mqtt_send(ep: Endpoint, password: str, topic: str, bodies: list[str], qos: int,
              timeout: float) -> None:
    client, result = _mqtt_client(ep, password, timeout)
    try:
        for body in bodies:
            info = client.publish(topic, body.encode(), qos=qos)
            info.wait_for_publish(timeout)
            if not info.is_published() or "lost" in result:
                raise CliError(f"publishing to {topic} failed (the broker closed the "
                               "connection: not authorized?)")
    finally:
        client.disconnect()
        client.loop_stop()


def mqtt_receive(ep: Endpoint, password: str, topic: str, count: int, qos: int,
                 timeout: float, as_json: bool) -> int:
    received: list = []
    enough = threading.Event()

    def on_message(c, userdata, message):
        received.append(message)
        if len(received) >= count:
            enough.set()

    client, result = _mqtt_client(ep, password, timeout, on_message)
    try:
        _, mid = client.subscribe(topic, qos=qos)
        enough.wait(timeout)
        if "lost" in result:
            raise CliError(f"subscribing to {topic} failed (the broker closed the "
                           "connection: not authorized?)")
    finally:
        client.disconnect()
        client.loop_stop()
    for message in received[:count]:
        emit(message.payload, message.topic, None, as_json)
    if len(received) < count:
        raise TimedOut(f"received {len(received)} of {count} message(s) from {topic} within "
                       f"{timeout:g}s")
    return count


def password_of(given: str | None) -> str:
    import os

    password = given or os.environ.get("MAASCTL_PASSWORD")
    if not password:
        raise UsageError("give --password or set MAASCTL_PASSWORD (the messaging user's)")
    return password
