"""Helpers to look at RabbitMQ directly (its management API) and talk to it over AMQP 1.0."""
from urllib.parse import quote

import requests
from django.conf import settings
from proton import Message
from proton.utils import BlockingConnection


def api(path: str):
    response = requests.get(f"{settings.RABBITMQ_API_URL}{path}",
                            auth=(settings.RABBITMQ_API_USER, settings.RABBITMQ_API_PASSWORD),
                            timeout=10)
    return response


def vhost_exists(vhost: str) -> bool:
    return api(f"/vhosts/{quote(vhost, safe='')}").status_code == 200


def queue_names(vhost: str) -> set[str]:
    response = api(f"/queues/{quote(vhost, safe='')}?columns=name")
    return {q["name"] for q in response.json()} if response.status_code == 200 else set()


def broker_state(vhost: str) -> dict:
    """What a vhost holds, in a comparable form."""
    v = quote(vhost, safe="")
    return {
        "queues": sorted((q["name"], q.get("type")) for q in api(f"/queues/{v}").json()),
        "exchanges": sorted(e["name"] for e in api(f"/exchanges/{v}").json()),
        "bindings": sorted((b["source"], b["destination"], b["routing_key"])
                           for b in api(f"/bindings/{v}").json()),
        "policies": sorted((p["name"], str(sorted(p["definition"].items())))
                           for p in api(f"/policies/{v}").json()),
        "permissions": sorted((p["user"], p["configure"], p["write"], p["read"])
                              for p in api(f"/vhosts/{v}/permissions").json()),
    }


def user_names() -> set[str]:
    return {u["name"] for u in api("/users").json()}


def delete_queue(vhost: str, name: str) -> None:
    requests.delete(f"{settings.RABBITMQ_API_URL}/queues/{quote(vhost, safe='')}/"
                    f"{quote(name, safe='')}",
                    auth=(settings.RABBITMQ_API_USER, settings.RABBITMQ_API_PASSWORD),
                    timeout=10).raise_for_status()


class SessionEnded(Exception):
    """RabbitMQ's AMQP 1.0 plugin reports errors (such as access refused) by ending the session."""


class Connection(BlockingConnection):
    def on_session_remote_close(self, event):
        raise SessionEnded(str(event.session.remote_condition))


def connect(vhost: str, user: str, password: str) -> Connection:
    return Connection(
        f"amqp://{settings.RABBITMQ_AMQP_HOST}:{settings.RABBITMQ_AMQP_PORT}",
        user=user, password=password, virtual_host=f"vhost:{vhost}", timeout=10,
        allowed_mechs="PLAIN",
    )


def send(vhost: str, user: str, password: str, queue: str, body: str) -> None:
    """Sends one message to a brokered space's queue (its own exchange, docs/storage.md) and
    waits until the broker accepted it."""
    conn = connect(vhost, user, password)
    try:
        conn.create_sender(f"/exchange/{queue}").send(Message(body=body))
    finally:
        conn.close()


def receive(vhost: str, user: str, password: str, queue: str, timeout: float = 10) -> str:
    conn = connect(vhost, user, password)
    try:
        receiver = conn.create_receiver(f"/amq/queue/{queue}")
        message = receiver.receive(timeout=timeout)
        receiver.accept()
        return message.body
    finally:
        conn.close()
