"""Which agents a space needs is read from the settings when asked, not fixed at import, and an
installation without a router says so instead of leaving standard spaces waiting forever."""
from config_service import services
from config_service.models import AddressSpace
from config_service.status import agents_needed, space_status
from tests.conftest import CTX, space_manifest


def test_the_agents_a_space_needs_follow_the_settings(settings):
    assert agents_needed("standard") == ("storage", "router")
    settings.MAAS_INFRA_BACKEND = "kubernetes"
    assert agents_needed("standard") == ("storage", "router", "infra")
    assert agents_needed("brokered") == ("storage",)


def test_without_a_router_a_standard_space_is_refused_with_the_field(tenant, api, settings):
    settings.MAAS_ROUTER_ENABLED = False
    url = f"/api/v1/tenants/{tenant.slug}/addressspaces/"
    response = api.post(url, space_manifest("std", "standard"), format="json")
    assert response.status_code == 400 and response.json()["field"] == "spec.type"
    assert not AddressSpace.objects.filter(tenant=tenant, name="std").exists()
    assert api.post(url, space_manifest("brk"), format="json").status_code == 201


def test_a_standard_space_made_before_the_router_was_disabled_says_why_it_waits(tenant,
                                                                                settings):
    space = services.create_address_space(ctx=CTX, tenant=tenant, name="old", type="standard",
                                          plan="standard-small")
    settings.MAAS_ROUTER_ENABLED = False
    status = space_status(space, {})
    assert status.phase == "Configuring"
    assert any("MAAS_ROUTER_ENABLED=false" in m for m in status.messages)
