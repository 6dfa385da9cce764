"""Portal pages with Django's test client: roles, isolation, forms and their errors."""
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from config_service import services
from config_service.models import Address, AddressSpace, MessagingUser
from tests.conftest import CTX, free_tcp_port
from tests.qdrouterd import fake_binary


@pytest.fixture
def space(tenant):
    return services.create_address_space(ctx=CTX, tenant=tenant, name="shop", type="brokered",
                                         plan="brokered-single-broker")


def login(client, user):
    client.force_login(user)
    return client


def test_the_owner_sees_edit_controls_and_the_viewer_does_not(client, tenant, space, owner,
                                                               viewer):
    page = login(client, owner).get(f"/portal/t/{tenant.slug}/spaces/shop/")
    assert page.status_code == 200
    assert b"New address" in page.content and b"Delete this address space" in page.content
    client.logout()
    page = login(client, viewer).get(f"/portal/t/{tenant.slug}/spaces/shop/")
    assert page.status_code == 200
    assert b"New address" not in page.content and b"Delete this address space" not in page.content


def test_the_server_refuses_a_viewer_anyway(client, tenant, space, viewer):
    login(client, viewer)
    response = client.post(f"/portal/t/{tenant.slug}/spaces/shop/addresses/new/",
                           {"address": "x", "type": "queue", "plan": "brokered-queue"})
    assert response.status_code == 403
    assert not Address.objects.exists()
    assert client.post(f"/portal/t/{tenant.slug}/spaces/shop/delete/").status_code == 403
    assert AddressSpace.objects.get(name="shop").terminating is False


def test_an_outsider_gets_404_everywhere(client, tenant, space, outsider):
    login(client, outsider)
    for path in ("", "spaces/shop/", "spaces/shop/users/", "spaces/shop/connect/", "usage/",
                 "history/", "spaces/shop/addresses/"):
        assert client.get(f"/portal/t/{tenant.slug}/{path}").status_code == 404, path


def test_creating_an_address_and_a_form_error_naming_the_problem(client, tenant, space, admin_member):
    login(client, admin_member)
    base = f"/portal/t/{tenant.slug}/spaces/shop/"
    client.post(base + "addresses/new/", {"address": "orders", "type": "queue",
                                          "plan": "brokered-queue"})
    assert Address.objects.filter(address="orders").exists()
    response = client.post(base + "addresses/new/", {"address": "orders", "type": "queue",
                                                     "plan": "brokered-queue"}, follow=True)
    assert b"already exists" in response.content
    assert Address.objects.filter(address="orders").count() == 1


def test_bulk_create_from_an_enmasse_yaml_file(client, tenant, space, owner):
    login(client, owner)
    manifest = b"""
apiVersion: enmasse.io/v1beta1
kind: AddressList
items:
- metadata: {name: shop.a1}
  spec: {address: a1, type: queue, plan: brokered-queue}
- metadata: {name: shop.t1}
  spec: {address: t1, type: topic, plan: brokered-topic}
---
apiVersion: enmasse.io/v1beta1
kind: Address
metadata: {name: shop.bad}
spec: {address: bad, type: anycast, plan: brokered-queue}
"""
    response = client.post(f"/portal/t/{tenant.slug}/spaces/shop/addresses/bulk/",
                           {"manifest": SimpleUploadedFile("a.yaml", manifest)}, follow=True)
    assert b"2 address(es) created" in response.content
    assert b"bad: spec.type must be one of" in response.content
    assert set(Address.objects.values_list("address", flat=True)) == {"a1", "t1"}


def test_a_new_user_password_is_shown_once_and_only_stored_hashed(client, tenant, space, owner):
    login(client, owner)
    response = client.post(f"/portal/t/{tenant.slug}/spaces/shop/users/",
                           {"username": "app", "send": "orders", "recv": "orders"})
    assert b'data-testid="new-password"' in response.content
    assert MessagingUser.objects.get(username="app").authorization == [
        {"addresses": ["orders"], "operations": ["send"]},
        {"addresses": ["orders"], "operations": ["recv"]}]
    again = client.get(f"/portal/t/{tenant.slug}/spaces/shop/users/")
    assert b'data-testid="new-password"' not in again.content


def test_addresses_table_pages_filters_and_sorts_on_the_server(client, tenant, space, owner):
    for i in range(60):
        services.create_address(ctx=CTX, space=space, address=f"q{i:02d}", type="queue",
                                plan="brokered-queue")
    services.create_address(ctx=CTX, space=space, address="topic1", type="topic",
                            plan="brokered-topic")
    login(client, owner)
    base = f"/portal/t/{tenant.slug}/spaces/shop/addresses/"
    first = client.get(base).content.decode()
    assert "61 address(es)" in first and "Page 1 of 2" in first
    assert first.count('data-testid="address"') == 50
    only_topic = client.get(base + "?type=topic").content.decode()
    assert only_topic.count('data-testid="address"') == 1
    desc = client.get(base + "?sort=-name").content.decode()
    assert desc.index(">topic1<") < desc.index(">q59<")
    found = client.get(base + "?search=q0").content.decode()
    assert found.count('data-testid="address"') == 10


def test_history_and_connect_pages(client, tenant, space, owner):
    services.create_messaging_user(ctx=CTX, space=space, username="app",
                                   authentication={"type": "password",
                                                   "password": "YXBwLXBhc3N3b3Jk"})
    login(client, owner)
    history = client.get(f"/portal/t/{tenant.slug}/history/").content.decode()
    assert "address_space.created" in history and "&lt;redacted&gt;" in history
    connect = client.get(f"/portal/t/{tenant.slug}/spaces/shop/connect/").content.decode()
    assert "app@" in connect and "BlockingConnection" in connect and "createProducer" in connect


def test_a_space_with_its_own_endpoint_shows_its_host_and_ca_to_a_viewer(client, tenant,
                                                                         viewer, outsider,
                                                                         settings):
    """spec.endpoints in the portal: the endpoint's host in place of the platform's, and the
    space's own CA (what its TLS clients trust), to every member; an outsider gets 404. With
    the brokered-amqp relay, the Connect page uses the address's own name."""
    from tests.certs import bundle

    tenant_bundle = bundle("mq.shop.example")
    services.create_address_space(
        ctx=CTX, tenant=tenant, name="own", type="brokered", plan="brokered-single-broker",
        spec={"endpoints": [{"name": "messaging", "cert": tenant_bundle.spec(),
                             "expose": {"routeHost": "mq.shop.example"}}]})
    page = login(client, viewer).get(f"/portal/t/{tenant.slug}/spaces/own/")
    assert page.status_code == 200
    assert b"amqp mq.shop.example:" in page.content
    assert tenant_bundle.ca.splitlines()[1].encode() in page.content
    services.create_address(ctx=CTX, space=AddressSpace.objects.get(name="own"),
                            address="orders", type="queue", plan="brokered-queue")
    settings.MAAS_BROKERED_AMQP_PORT = 5678
    connect = client.get(f"/portal/t/{tenant.slug}/spaces/own/connect/").content.decode()
    assert 'amqp://mq.shop.example:5678"' in connect
    assert 'create_sender("orders")' in connect and 'create_receiver("orders")' in connect
    client.logout()
    assert login(client, outsider).get(
        f"/portal/t/{tenant.slug}/spaces/own/").status_code == 404


def test_a_viewer_sees_the_connectors_and_why_one_is_not_ready(client, tenant, viewer, tmp_path,
                                                               monkeypatch, settings):
    fake_binary(tmp_path, monkeypatch)  # spec.connectors need qdrouterd
    # A router that does not answer (nothing listens there): the state says so.
    settings.MAAS_ROUTER_MANAGEMENT_URL = f"amqp://127.0.0.1:{free_tcp_port()}"
    services.create_address_space(ctx=CTX, tenant=tenant, name="bridge", type="standard",
                                  plan="standard-small", spec={"connectors": [{
                                      "name": "site",
                                      "endpointHosts": [{"host": "amqp.eu.example",
                                                         "port": 5671}],
                                      "credentials": {"username": "app", "password": "s3cret"},
                                      "addresses": [{"name": "orders", "pattern": "orders/*"}]}]})
    page = login(client, viewer).get(f"/portal/t/{tenant.slug}/spaces/bridge/")
    assert page.status_code == 200
    text = page.content.decode()
    assert 'data-testid="connectors"' in text
    assert "<td>site</td><td>amqp.eu.example:5671</td><td>orders/*</td><td>no</td>" \
           "<td>Not ready</td><td>Router did not answer</td>" in text
    assert "s3cret" not in text
