"""What the control plane does about hostile clients of the data plane (issue 60): addresses the
data plane cannot carry are refused at the API, naming the field; every /api/ path answers the
API's error shape, also one no view matches; the portal's pages carry a Content-Security-Policy;
RabbitMQ's Prometheus figures, which name every tenant, are on loopback only."""
import pytest

from config_service.models import Address
from eventlog.models import ConfigEvent
from tests.conftest import address_manifest
from tests.security.test_hostile_input import addresses_url, brokered, refused  # noqa: F401


@pytest.mark.parametrize("wire", ["ｑ１", "qа", "a\u202eb", "a\u200db", "caf\u00e9", "q\u00adr"])
def test_an_address_outside_printable_ascii_is_refused(tenant, api, brokered,  # noqa: F811
                                                       wire):
    events = ConfigEvent.objects.count()
    manifest = address_manifest("bs", "x")
    manifest["spec"]["address"] = wire
    body = refused(api.post(addresses_url(tenant), manifest, format="json"), "spec.address")
    assert "ASCII" in body["message"]
    assert not Address.objects.exists()
    assert ConfigEvent.objects.count() == events


@pytest.mark.parametrize("path", ["/api/v1/tenants/../addressplans/", "/api/v1/x%2Fy/",
                                  "/api/v1/tenants/acme/addressspaces/a/b/c/d/e/",
                                  "/api/nowhere"])
def test_every_api_path_answers_the_api_s_error_shape(api, path):
    response = api.get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"status": 404, "code": "not_found", "message": "Not found.",
                               "detail": "Not found."}


def test_a_page_outside_the_api_is_still_django_s(client):
    response = client.get("/nowhere/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_the_portal_s_pages_run_this_site_s_scripts_only(client, owner, tenant):
    client.force_login(owner)
    page = client.get(f"/portal/t/{tenant.slug}/")
    assert page.status_code == 200
    policy = page["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert b"<script>" not in page.content  # none inline: the policy would stop it
    assert "Content-Security-Policy" not in client.get("/api/docs/")  # Swagger's own script


def test_rabbitmq_s_prometheus_figures_are_on_loopback_only():
    """Read from the kernel's table of listening sockets: 15692 (`make run`'s node) and the
    test node's listen on 127.0.0.1 alone (deploy/local/services.sh, rabbitmq-nodes.sh)."""
    from tests import broker

    listening = {}
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if state == "0A":  # LISTEN
            address, port = local.split(":")
            listening.setdefault(int(port, 16), set()).add(address)
    for port in (15692, broker.PROMETHEUS_PORT):
        assert listening.get(port) == {"0100007F"}, (port, listening.get(port))
