"""The Connections page of a space with Django's test client, against the embedded router and
real proton clients: who is connected and their links, filtering, a close after confirmation
that the client sees and the audit trail records; a viewer sees no Close and is refused one
(403), an outsider gets 404, and a router that does not answer gives a message, not an error."""
import re
from html import unescape

import pytest
from django.test import Client
from proton import ConnectionException

from config_service import services
from eventlog.models import ConfigEvent
from tests.conftest import CTX, free_tcp_port, wait_for
from tests.workers.conftest import router, router_kind, router_settings, sync  # noqa: F401
from tests.workers.connected import connect, exchange, standard_space

# The auth service the router asks reads messaging users from its own database connection.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def space(tenant):
    s = standard_space(tenant, "shop")
    yield s
    services.delete_address_space(ctx=CTX, space=s)
    sync(s)


@pytest.fixture
def connected(router, space):  # noqa: F811
    """Two clients of the space: one has sent two messages to `orders`, the other has received
    and accepted them."""
    receiving = connect(router, space, "portal-receiver")
    sending = connect(router, space, "portal-sender")
    exchange(sending, receiving, 2)
    yield sending, receiving
    for conn in (sending, receiving):
        try:
            conn.close()
        except Exception:  # the test closed it from the portal
            pass


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def rows(html: bytes, testid: str) -> list[list[str]]:
    """The cells' text of the table rows marked data-testid=`testid`."""
    found = re.findall(rf'<tr data-testid="{testid}"[^>]*>(.*?)</tr>', html.decode(), re.S)
    return [[unescape(re.sub(r"<[^>]+>", "", cell)).strip()
             for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)] for row in found]


def ids(html: bytes) -> dict[str, str]:
    """{container id: connection id} of the listed connections."""
    return {container: cid for cid, container in re.findall(
        r'data-connection="([^"]+)">\s*<td><a [^>]*>[▸▾] ([^<]+)</a>', html.decode())}


def test_a_viewer_sees_the_clients_and_their_links_but_cannot_close_one(
        tenant, space, connected, viewer, outsider):
    base = f"/portal/t/{tenant.slug}/spaces/shop/"
    client = signed_in(viewer)
    assert b'href="/portal/t/%s/spaces/shop/connections/"' % tenant.slug.encode() in \
        client.get(base).content

    listing = client.get(base + "connections/")
    assert listing.status_code == 200
    by_container = {r[0].lstrip("▸ "): r for r in rows(listing.content, "connection")}
    assert set(by_container) == {"portal-sender", "portal-receiver"}
    # container id, user, protocol, host, via, senders, receivers, messages in, out, age
    sender = by_container["portal-sender"]
    assert sender[1:3] == ["app", "amqp"] and sender[3].startswith("127.0.0.1:")
    assert sender[4:9] == ["router", "1", "0", "2", "0"] and sender[9].endswith(" s")
    assert by_container["portal-receiver"][5:9] == ["0", "1", "0", "2"]
    assert b"/close/" not in listing.content and b"TLS" not in listing.content
    assert b'hx-trigger="every 5s"' in listing.content
    assert not rows(listing.content, "links")

    receiver_id = ids(listing.content)["portal-receiver"]
    opened = client.get(base + "connections/rows/", {"open": receiver_id})
    # role, address, deliveries, credit, unsettled, accepted, rejected, released; the client
    # tops its credit up as it likes
    (link,) = rows(opened.content, "link")
    assert link[:3] == ["receiver", "orders", "2"] and link[3].isdigit()
    assert link[4:] == ["0", "2", "0", "0"]
    # the refresh keeps the links open
    assert f"rows/?open={receiver_id}" in opened.content.decode()
    found = client.get(base + "connections/rows/", {"search": "SENDER"})
    assert [r[0] for r in rows(found.content, "connection")] == ["▸ portal-sender"]
    assert rows(client.get(base + "connections/rows/", {"protocol": "mqtt"}).content,
                "connection") == []

    sender_id = ids(listing.content)["portal-sender"]
    assert client.get(base + f"connections/{sender_id}/close/").status_code == 403
    assert client.post(base + f"connections/{sender_id}/close/").status_code == 403
    sending, _ = connected
    assert sending.create_receiver("orders", credit=1) is not None  # still open
    assert not ConfigEvent.objects.filter(type="tenant.connection_closed").exists()

    stranger = signed_in(outsider)
    for path in ("connections/", "connections/rows/", f"connections/{sender_id}/close/"):
        assert stranger.get(base + path).status_code == 404, path
    assert stranger.post(base + f"connections/{sender_id}/close/").status_code == 404


def test_an_admin_closes_a_connection_after_confirming_and_the_client_sees_it(
        tenant, space, connected, admin_member):
    base = f"/portal/t/{tenant.slug}/spaces/shop/"
    client = signed_in(admin_member)
    listing = client.get(base + "connections/")
    sender_id = ids(listing.content)["portal-sender"]
    close = f"{base}connections/{sender_id}/close/"
    assert f'href="{close}"'.encode() in listing.content

    confirm = client.get(close)
    assert confirm.status_code == 200
    assert b"Close the connection of portal-sender?" in confirm.content
    assert not ConfigEvent.objects.filter(type="tenant.connection_closed").exists()

    done = client.post(close, follow=True)
    assert done.redirect_chain == [(base + "connections/", 302)]
    assert b"Connection of portal-sender (app, 127.0.0.1:" in done.content
    sending, receiving = connected
    with pytest.raises(ConnectionException, match="forced"):
        sending.wait(lambda: False, timeout=10)
    sending.close()  # answers the router's close, which then forgets the connection
    wait_for(lambda: set(ids(client.get(base + "connections/rows/").content)) == {
        "portal-receiver"}, timeout=10, what="the closed connection to leave the list")
    event = ConfigEvent.objects.get(type="tenant.connection_closed")
    assert event.actor == f"user:{admin_member.get_username()}"
    assert event.payload["id"] == sender_id and event.payload["container_id"] == "portal-sender"

    # closed meanwhile: a message, nothing recorded
    again = client.post(close, follow=True)
    assert b"No connection" in again.content
    assert ConfigEvent.objects.filter(type="tenant.connection_closed").count() == 1
    assert receiving.create_sender("orders") is not None  # untouched


def test_a_router_that_does_not_answer_gives_a_message_not_an_error(
        settings, tenant, admin_member):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name="shop", type="standard",
                                      plan="standard-medium")
    settings.MAAS_ROUTER_MANAGEMENT_URL = f"amqp://127.0.0.1:{free_tcp_port()}"
    base = f"/portal/t/{tenant.slug}/spaces/{s.name}/"
    client = signed_in(admin_member)
    for path in ("connections/", "connections/rows/"):
        page = client.get(base + path)
        assert page.status_code == 200
        assert b'data-testid="connections-unavailable"' in page.content
        assert b"did not answer" in page.content
    closing = client.post(base + "connections/router-1/close/", follow=True)
    assert closing.status_code == 200 and b"did not answer" in closing.content
    assert not ConfigEvent.objects.filter(type="tenant.connection_closed").exists()
