"""maasctl end to end on a live platform (API, Celery worker, router, RabbitMQ): EnMasse-shaped
manifests applied as they are, waited on until Active, then messages sent and received over
AMQP 1.0 and MQTT by the same tool, objects changed by a second apply and deleted."""
import json
import time

import pytest

from .conftest import DATA, ok

pytestmark = pytest.mark.slow

USER = ("-u", "user1", "-p", "password")  # the EnMasse example's user (password: base64)


def received_while_sending(cli, space: str, address: str, protocol: str = "amqp",
                           count: int = 1) -> str:
    """What a receiver started first gets while a sender keeps sending: direct addresses
    (anycast, multicast) and topics only deliver to receivers attached at the time."""
    receiver = cli.popen("receive", address, "-s", space, *USER, "--protocol", protocol,
                         "--count", str(count), "--timeout", "40s")
    try:
        deadline = time.monotonic() + 40
        while receiver.poll() is None and time.monotonic() < deadline:
            sent = cli("send", address, "-s", space, *USER, "--protocol", protocol,
                       "--body", f"{address}-ping", "--timeout", "3s")
            # 3: a direct address gives a sender no credit while nobody receives
            assert sent.returncode in (0, 3), sent.stderr
            time.sleep(0.2)
        out, err = receiver.communicate(timeout=45)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.communicate()
    assert receiver.returncode == 0, err
    return out


def test_enmasse_examples_become_active_and_carry_messages_in_a_standard_space(platform):
    cli = platform
    files = [str(DATA / f) for f in ("standard-space.yaml", "standard-addresses.yaml",
                                     "standard-user.yaml")]
    out = ok(cli("apply", *[arg for f in files for arg in ("-f", f)]))
    assert out.splitlines() == [
        "addressspace.enmasse.io/myspace created",
        "address.enmasse.io/myspace.myqueue created",
        "address.enmasse.io/myspace.mytopic created",
        "address.enmasse.io/myspace.myanycast created",
        "address.enmasse.io/myspace.mymulticast created",
        "messaginguser.user.enmasse.io/myspace.user1 created",
    ]
    waited = ok(cli("wait", *[arg for f in files for arg in ("-f", f)], "--for=phase=Active",
                    "--timeout=120s", timeout=150))
    assert waited.splitlines()[0] == "addressspace.enmasse.io/myspace condition met"
    assert len(waited.splitlines()) == 6

    # Applying the same manifests again changes nothing.
    again = ok(cli("apply", "-f", str(DATA / "standard-addresses.yaml")))
    assert again.splitlines() == [f"address.enmasse.io/myspace.{a} unchanged" for a in
                                  ("myqueue", "mytopic", "myanycast", "mymulticast")]

    rows = ok(cli("get", "addresses", "-s", "myspace")).splitlines()
    assert rows[0].split() == ["NAME", "ADDRESS", "TYPE", "PLAN", "READY", "PHASE", "AGE"]
    assert sorted(r.split()[:6] for r in rows[1:]) == [
        ["myspace.myanycast", "myanycast", "anycast", "standard-small-anycast", "true",
         "Active"],
        ["myspace.mymulticast", "mymulticast", "multicast", "standard-small-multicast",
         "true", "Active"],
        ["myspace.myqueue", "myqueue", "queue", "standard-small-queue", "true", "Active"],
        ["myspace.mytopic", "mytopic", "topic", "standard-small-topic", "true", "Active"],
    ]

    # A queue stores what was sent before anyone receives.
    ok(cli("send", "myqueue", "-s", "myspace", *USER, "--body", "order", "--count", "2",
           "--number"))
    assert ok(cli("receive", "myqueue", "-s", "myspace", *USER, "--count", "2")) == \
        "order 1\norder 2\n"
    for address in ("myanycast", "mymulticast", "mytopic"):
        assert received_while_sending(cli, "myspace", address) == f"{address}-ping\n"

    # The user's rules hold: it may not receive from queue1 (send only).
    refused = cli("receive", "queue1", "-s", "myspace", *USER, "--timeout", "5s")
    assert refused.returncode == 1, (refused.returncode, refused.stderr)
    assert "receiving from queue1 failed" in refused.stderr

    # A changed manifest on stdin updates the object in place.
    queue = json.loads(ok(cli("get", "address", "myspace.myqueue", "-o", "json")))
    queue["spec"]["plan"] = "standard-medium-queue"
    assert ok(cli("apply", "-f", "-", input=json.dumps(queue))) == \
        "address.enmasse.io/myspace.myqueue configured\n"
    changed = json.loads(ok(cli("get", "address", "myspace.myqueue", "-o", "json")))
    assert changed["spec"]["plan"] == "standard-medium-queue"
    assert int(changed["metadata"]["resourceVersion"]) > int(queue["metadata"]["resourceVersion"])

    described = ok(cli("describe", "addressspace", "myspace"))
    assert "Name:             myspace" in described
    assert "  Plan:  standard-unlimited" in described
    assert "  Endpoint Statuses:" in described
    assert "Virtual Host:" in described
    wide = ok(cli("get", "as", "-o", "wide")).splitlines()
    assert wide[0].split()[-2:] == ["STATUS", "ENDPOINTS"]
    assert "amqp://" in wide[1]
    assert ok(cli("get", "users", "-s", "myspace", "-o", "name")) == \
        "messaginguser.user.enmasse.io/myspace.user1\n"

    assert ok(cli("delete", "address", "myspace.mymulticast")) == \
        'address.enmasse.io "myspace.mymulticast" deleted\n'
    ok(cli("delete", "addressspace", "myspace", "--wait", "--timeout", "90s", timeout=120))
    gone = cli("get", "as", "myspace")
    assert gone.returncode == 1
    assert gone.stderr.startswith('Error from server (NotFound): addressspaces.enmasse.io '
                                  '"myspace" not found')


def test_a_brokered_space_from_one_multi_document_file_carries_amqp_and_mqtt(platform):
    cli = platform
    manifest = str(DATA / "brokered.yaml")
    assert ok(cli("apply", "-f", manifest)).splitlines() == [
        "addressspace.enmasse.io/mybrokered created",
        "address.enmasse.io/mybrokered.myqueue created",
        "address.enmasse.io/mybrokered.mytopic created",
        "messaginguser.user.enmasse.io/mybrokered.user1 created",
    ]
    ok(cli("wait", "-f", manifest, "--for=condition=Ready", "--timeout=90s", timeout=120))
    ok(cli("wait", "messaginguser", "mybrokered.user1", "--for=phase=Active", "--timeout=60s"))

    ok(cli("send", "myqueue", "-s", "mybrokered", *USER, "--body", "invoice"))
    assert ok(cli("receive", "myqueue", "-s", "mybrokered", *USER, "-o", "json")) == \
        json.dumps({"body": "invoice", "subject": None, "properties": {}}) + "\n"
    assert received_while_sending(cli, "mybrokered", "mytopic") == "mytopic-ping\n"
    assert received_while_sending(cli, "mybrokered", "mytopic", protocol="mqtt",
                                  count=2) == "mytopic-ping\nmytopic-ping\n"

    # A `/` in a queue's name, and a user whose rules name that queue alone (not `*`).
    slashed = """
apiVersion: enmasse.io/v1beta1
kind: Address
metadata: {name: mybrokered.orders-eu}
spec: {address: orders/eu, type: queue, plan: brokered-queue}
---
apiVersion: user.enmasse.io/v1beta1
kind: MessagingUser
metadata: {name: mybrokered.user2}
spec:
  username: user2
  authentication: {type: password, password: cGFzc3dvcmQ=}
  authorization:
  - {addresses: ["orders/eu"], operations: ["send", "recv"]}
"""
    ok(cli("apply", "-f", "-", input=slashed))
    ok(cli("wait", "address", "mybrokered.orders-eu", "--for=phase=Active", "--timeout=60s"))
    ok(cli("wait", "messaginguser", "mybrokered.user2", "--for=phase=Active", "--timeout=60s"))
    second = ("-u", "user2", "-p", "password")
    ok(cli("send", "orders/eu", "-s", "mybrokered", *second, "--body", "ordered"))
    assert ok(cli("receive", "orders/eu", "-s", "mybrokered", *second)) == "ordered\n"

    # MQTT is refused outside the user's rules: the broker closes the connection.
    refused = cli("send", "elsewhere", "-s", "mybrokered", *USER, "--protocol", "mqtt")
    assert refused.returncode == 1, (refused.returncode, refused.stderr)

    ok(cli("delete", "-f", manifest, "--ignore-not-found", "--wait", "--timeout", "90s",
           timeout=120))
    assert cli("get", "as", "mybrokered").returncode == 1
