"""Health, readiness, metrics and the OpenAPI schema."""
import json

from config_service import services
from tests.conftest import CTX
from tests.qdrouterd import fake_binary


def test_healthz_and_readyz_check_the_real_services(client, db, redis_server):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.content
    assert set(ready.json()["checks"]) == {"database", "redis", "router", "rabbitmq"}


def test_readyz_names_a_failed_check(client, db, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["redis"]["status"] == "error"
    assert response.json()["checks"]["database"]["status"] == "ok"


def test_metrics_count_addresses_per_phase(client, tenant):
    space = services.create_address_space(ctx=CTX, tenant=tenant, name="m", type="standard",
                                          plan="standard-small")
    services.create_address(ctx=CTX, space=space, address="big", type="queue",
                            plan="standard-large-queue")
    services.create_address(ctx=CTX, space=space, address="big2", type="queue",
                            plan="standard-large-queue")
    text = client.get("/metrics").content.decode()
    labels = f'addressspace="m",namespace="{tenant.slug}"'
    assert f"enmasse_addresses_total{{{labels}}} 2.0" in text
    assert f"enmasse_addresses_pending_total{{{labels}}} 1.0" in text
    assert f"enmasse_addresses_configuring_total{{{labels}}} 1.0" in text
    assert "enmasse_address_spaces_total 1.0" in text
    assert "maas_outbox_backlog 3.0" in text
    assert "maas_event_apply_latency_seconds" in text


def test_metrics_count_the_spaces_connectors(client, tenant, tmp_path, monkeypatch):
    fake_binary(tmp_path, monkeypatch)  # spec.connectors need qdrouterd
    connector = {"endpointHosts": [{"host": "amqp.example.com"}],
                 "addresses": [{"name": "all", "pattern": "#"}]}
    services.create_address_space(
        ctx=CTX, tenant=tenant, name="bridge", type="standard", plan="standard-small",
        spec={"connectors": [{"name": "eu", **connector}, {"name": "us", **connector}]})
    services.create_address_space(ctx=CTX, tenant=tenant, name="plain", type="standard",
                                  plan="standard-small")
    assert "enmasse_address_space_connectors_total 2.0" in client.get("/metrics").content.decode()


def test_the_openapi_schema_lists_the_api(client, db):
    schema = client.get("/api/schema/?format=json").json()
    assert "/api/v1/tenants/{tenant}/addressspaces/{space}/addresses/" in schema["paths"]
    assert "/api/v1/tenants/{tenant}/events/" in schema["paths"]
    assert "delete" in schema["paths"]["/api/v1/tenants/{tenant}/"]
    assert "post" in schema["paths"]["/api/v1/tenants/{tenant}/invitations/"]
    operations = [op["operationId"] for path in schema["paths"].values() for op in path.values()]
    assert len(operations) == len(set(operations))
    assert "v1_tenants_list" in operations


def test_the_schema_generates_without_a_warning(db, tmp_path):
    from django.core.management import call_command

    call_command("spectacular", "--validate", "--fail-on-warn", "--file", tmp_path / "s.yaml")


def test_the_admin_shows_spaces_with_connection_details_and_the_event_log(client, tenant):
    from tests.conftest import make_user

    space = services.create_address_space(ctx=CTX, tenant=tenant, name="adm", type="standard",
                                          plan="standard-small")
    staff = make_user("root-operator", staff=True)
    staff.is_superuser = True
    staff.save()
    client.force_login(staff)
    page = client.get(f"/admin/config_service/addressspace/{space.pk}/change/")
    assert page.status_code == 200
    assert b"amqp 127.0.0.1:" in page.content
    log = client.get("/admin/eventlog/configevent/?type=address_space.created")
    assert log.status_code == 200 and b"address_space.created" in log.content


def test_the_admin_shows_tenants_and_invitations_but_never_deletes_or_renames_a_tenant(client,
                                                                                       tenant):
    from tenants.invitations import invite
    from tests.conftest import make_user

    invite(ctx=CTX, tenant=tenant, email="ivy@example.com", role="viewer", invited_by=None)
    staff = make_user("root-operator", staff=True)
    staff.is_superuser = True
    staff.save()
    client.force_login(staff)
    page = client.get(f"/admin/tenants/tenant/{tenant.pk}/change/")
    assert page.status_code == 200
    assert b'name="slug"' not in page.content  # read-only: vhosts and usernames carry it
    assert client.get(f"/admin/tenants/tenant/{tenant.pk}/delete/").status_code == 403
    listing = client.get("/admin/tenants/invitation/")
    assert listing.status_code == 200 and b"ivy@example.com" in listing.content


def test_readyz_names_a_platform_process_that_keeps_failing(client, db, settings, tmp_path):
    state = tmp_path / "processes.json"
    settings.MAAS_PROCESS_STATE_FILE = str(state)
    state.write_text(json.dumps({"web": {"running": True, "failing": False},
                                 "authservice": {"running": False, "failing": True}}))
    response = client.get("/readyz")
    assert response.status_code == 503
    check = response.json()["checks"]["processes"]
    assert check["status"] == "error" and "failing to start: authservice" in check["error"]
    state.write_text(json.dumps({"authservice": {"running": True, "failing": False}}))
    assert client.get("/readyz").json()["checks"]["processes"]["status"] == "ok"


def test_readyz_is_false_while_a_router_configuration_is_being_restored(client, tenant):
    from config_service.models import AgentState
    from workers.agents import runner
    from workers.agents.router.watch import RESTORING

    space = services.create_address_space(ctx=CTX, tenant=tenant, name="rz", type="standard",
                                          plan="standard-small")
    AgentState.objects.create(space_uid=space.uid, kind="router", applied_sequence=1)
    assert client.get("/readyz").json()["checks"]["router"]["status"] == "ok"
    runner.invalidate("router", AgentState.objects.filter(space_uid=space.uid), RESTORING)
    response = client.get("/readyz")
    assert response.status_code == 503
    assert "configuration of 1 address space(s) is being restored" in (
        response.json()["checks"]["router"]["error"])
    AgentState.objects.filter(space_uid=space.uid).update(invalidated="")  # as a reconcile
    assert client.get("/readyz").json()["checks"]["router"]["status"] == "ok"
