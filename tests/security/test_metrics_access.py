"""/metrics names every tenant and address space: a Prometheus with MAAS_METRICS_TOKEN reads
it, and without that setting only a client on this machine does (maas/scrape_access.py)."""
import pytest

from config_service import services
from maas.scrape_access import is_loopback
from tests.conftest import CTX

REMOTE = "203.0.113.7"  # TEST-NET-3: somebody on the network


@pytest.fixture
def space(tenant):
    return services.create_address_space(ctx=CTX, tenant=tenant, name="scraped", type="standard",
                                         plan="standard-small")


def figures_of(response) -> str:
    return response.content.decode()


def test_a_remote_client_without_the_setting_gets_403_and_no_tenant_name(client, tenant, space,
                                                                          settings):
    settings.MAAS_METRICS_TOKEN = ""
    response = client.get("/metrics", REMOTE_ADDR=REMOTE)
    assert response.status_code == 403
    assert tenant.slug not in figures_of(response) and "scraped" not in figures_of(response)


def test_a_loopback_client_without_the_setting_reads_the_figures(client, tenant, space, settings):
    settings.MAAS_METRICS_TOKEN = ""
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 200
    assert f'addressspace="scraped",namespace="{tenant.slug}"' in figures_of(response)


def test_an_ipv6_loopback_client_reads_the_figures(client, space, settings):
    settings.MAAS_METRICS_TOKEN = ""
    assert client.get("/metrics", REMOTE_ADDR="::1").status_code == 200


def test_a_request_forwarded_by_a_local_proxy_is_not_taken_for_a_local_one(client, space,
                                                                           settings):
    settings.MAAS_METRICS_TOKEN = ""
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=REMOTE)
    assert response.status_code == 403


def test_with_a_token_set_a_scrape_without_it_gets_401(client, space, settings):
    settings.MAAS_METRICS_TOKEN = "scrape-me-9f2c"
    response = client.get("/metrics", REMOTE_ADDR=REMOTE)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="maas-metrics"'
    assert "scraped" not in figures_of(response)


def test_with_a_token_set_a_wrong_token_gets_401(client, space, settings):
    settings.MAAS_METRICS_TOKEN = "scrape-me-9f2c"
    response = client.get("/metrics", REMOTE_ADDR=REMOTE,
                          HTTP_AUTHORIZATION="Bearer scrape-me-9f2d")
    assert response.status_code == 401
    assert "scraped" not in figures_of(response)


def test_with_a_token_set_even_loopback_needs_it(client, space, settings):
    settings.MAAS_METRICS_TOKEN = "scrape-me-9f2c"
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 401


def test_with_a_token_set_a_non_ascii_token_is_refused_not_an_error(client, space, settings):
    settings.MAAS_METRICS_TOKEN = "scrape-me-9f2c"
    response = client.get("/metrics", REMOTE_ADDR=REMOTE, HTTP_AUTHORIZATION="Bearer jöke")
    assert response.status_code == 401


def test_with_a_token_set_the_right_token_reads_the_figures_from_anywhere(client, tenant, space,
                                                                          settings):
    settings.MAAS_METRICS_TOKEN = "scrape-me-9f2c"
    response = client.get("/metrics", REMOTE_ADDR=REMOTE,
                          HTTP_AUTHORIZATION="Bearer scrape-me-9f2c")
    assert response.status_code == 200
    assert f'enmasse_addresses_total{{addressspace="scraped",namespace="{tenant.slug}"}} 0.0' in (
        figures_of(response))
    assert "enmasse_address_spaces_total 1.0" in figures_of(response)


def test_the_token_can_come_from_a_file_named_by_the_file_variable(tmp_path, monkeypatch):
    from maas.env import env

    secret = tmp_path / "metrics-token"
    secret.write_text("from-a-secret\n")
    monkeypatch.setenv("MAAS_METRICS_TOKEN_FILE", str(secret))
    assert env("MAAS_METRICS_TOKEN", "") == "from-a-secret"


@pytest.mark.parametrize("address, local", [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("::ffff:127.0.0.1", True),
    ("10.0.0.1", False), ("::ffff:10.0.0.1", False), ("0.0.0.0", False), ("", False),
    ("localhost", False),
])
def test_only_loopback_addresses_count_as_this_machine(address, local):
    assert is_loopback(address) is local


def test_the_embedded_routers_metrics_stay_on_loopback_when_its_amqp_listener_does_not(
        monkeypatch):
    from dataplane.router.__main__ import parse_args

    monkeypatch.delenv("MAAS_ROUTER_METRICS_HOST", raising=False)
    args = parse_args(["--host", "0.0.0.0", "--metrics-port", "8091"])  # noqa: S104
    assert (args.host, args.metrics_host) == ("0.0.0.0", "127.0.0.1")  # noqa: S104
