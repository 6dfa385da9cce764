"""Where the MQTT gateway is listed: a standard space's `status.endpointStatuses`, its users'
`status.connectionUrls` and the portal's Connect page; an outsider sees none of it."""
import pytest

from config_service import services
from config_service.models import AddressSpace
from tests.conftest import CTX, address_manifest, space_manifest
from workers.agents.router.certificates import ensure_self_signed


@pytest.fixture
def tls(settings, tmp_path):
    settings.MAAS_ROUTER_TLS_CERT = str(tmp_path / "cert.pem")
    settings.MAAS_ROUTER_TLS_KEY = str(tmp_path / "key.pem")
    ensure_self_signed(settings.MAAS_ROUTER_TLS_CERT, settings.MAAS_ROUTER_TLS_KEY)


def test_a_standard_space_lists_mqtt_and_mqtts_and_its_users_get_their_urls(
        tenant, clients, settings, tls):
    base = f"/api/v1/tenants/{tenant.slug}/addressspaces/"
    created = clients["owner"].post(base, space_manifest("iot", "standard", "standard-medium"),
                                    format="json")
    assert created.status_code == 201, created.content
    vhost, host = f"{tenant.slug}.iot", settings.MAAS_PUBLIC_HOST
    mqtt = [e for e in created.json()["status"]["endpointStatuses"] if e["name"] == "mqtt"]
    assert mqtt == [{"name": "mqtt", "serviceHost": host, "username": f"<username>@{vhost}",
                     "servicePorts": [{"name": "mqtt", "port": settings.MAAS_MQTT_GATEWAY_PORT},
                                      {"name": "mqtts",
                                       "port": settings.MAAS_MQTT_GATEWAY_TLS_PORT}]}]
    user = clients["owner"].post(base + "iot/users/", {
        "spec": {"username": "dev", "authentication": {"type": "password",
                                                       "password": "c2VjcmV0LXBhc3M="},
                 "authorization": [{"addresses": ["*"], "operations": ["send"]}]}},
        format="json")
    assert user.status_code == 201, user.content
    urls = user.json()["status"]["connectionUrls"]
    assert f"mqtt://dev%40{vhost}@{host}:{settings.MAAS_MQTT_GATEWAY_PORT}" in urls
    assert f"mqtts://dev%40{vhost}@{host}:{settings.MAAS_MQTT_GATEWAY_TLS_PORT}" in urls
    assert clients["outsider"].get(base + "iot/").status_code == 404
    assert clients["outsider"].get(base + "iot/users/").status_code == 404


def test_without_the_gateway_a_standard_space_lists_no_mqtt(tenant, clients, settings):
    settings.MAAS_MQTT_GATEWAY_ENABLED = False
    base = f"/api/v1/tenants/{tenant.slug}/addressspaces/"
    created = clients["owner"].post(base, space_manifest("iot", "standard", "standard-medium"),
                                    format="json").json()
    assert [e["name"] for e in created["status"]["endpointStatuses"]] == ["messaging"]


def test_the_connect_page_shows_an_mqtt_example_for_a_topic(client, tenant, clients, owner,
                                                             outsider, settings):
    base = f"/api/v1/tenants/{tenant.slug}/addressspaces/"
    clients["owner"].post(base, space_manifest("iot", "standard", "standard-medium"),
                          format="json")
    clients["owner"].post(base + "iot/addresses/",
                          address_manifest("iot", "sensors", "topic", "standard-small-topic"),
                          format="json")
    services.create_messaging_user(
        ctx=CTX, space=AddressSpace.objects.get(tenant=tenant, name="iot"), username="dev",
        authentication={"type": "password", "password": "c2VjcmV0LXBhc3M="})
    client.force_login(owner)
    page = client.get(f"/portal/t/{tenant.slug}/spaces/iot/connect/").content.decode()
    assert (f"mosquitto_sub -h {settings.MAAS_PUBLIC_HOST} -p {settings.MAAS_MQTT_GATEWAY_PORT}"
            f" -u 'dev@{tenant.slug}.iot'") in page
    assert "-t 'sensors/room1'" in page
    assert page.count('data-testid="mqtt-example"') == 1  # in the page's body, not its title
    assert "<title>Connect to iot" in page and "mosquitto" not in page.split("</title>")[0]
    client.force_login(outsider)
    assert client.get(f"/portal/t/{tenant.slug}/spaces/iot/connect/").status_code == 404

