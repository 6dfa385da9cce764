"""An owner deletes a tenant: members lose access at once, the storage agent tears its brokers
down on the real RabbitMQ, a messaging user is refused afterwards, the audit trail stays, and
the name is free again once the address spaces are gone."""
import uuid

import pytest
from proton import ConnectionException

from config_service import services
from config_service.models import AddressSpace
from core.errors import NotFound
from eventlog.models import ConfigEvent
from tenants.models import Membership, Tenant
from tests.conftest import CTX, b64, client_for, make_user, space_manifest
from tests.workers import rabbit
from workers.agents import runner
from workers.agents.storage import rabbitmq


@pytest.fixture
def live_space(tenant):
    """A brokered space with a queue and a messaging user, applied on RabbitMQ."""
    space = services.create_address_space(ctx=CTX, tenant=tenant, name=f"s{uuid.uuid4().hex[:6]}",
                                          type="brokered", plan="brokered-single-broker")
    services.create_address(ctx=CTX, space=space, address="orders", type="queue",
                            plan="brokered-queue")
    services.create_messaging_user(
        ctx=CTX, space=space, username="app",
        authentication={"type": "password", "password": b64("app-password")},
        authorization=[{"addresses": ["orders"], "operations": ["send", "recv"]}])
    runner.run(space.uid, "storage")
    yield space
    if AddressSpace.objects.filter(uid=space.uid).exists():  # a failed test leaves no vhost
        services.delete_address_space(ctx=CTX, space=space)
        runner.run(space.uid, "storage")


def test_an_owner_deletes_the_tenant_and_everything_in_it_goes(tenant, live_space, clients,
                                                                owner):
    login = rabbitmq.broker_username(live_space.vhost, "app")
    rabbit.send(live_space.vhost, login, "app-password", "orders", "before")
    url = f"/api/v1/tenants/{tenant.slug}/"

    response = clients["owner"].delete(url)
    assert response.status_code == 202, response.content
    assert response.json()["status"]["phase"] == "Terminating"
    assert response.json()["status"]["terminatingAddressSpaces"] == [live_space.name]

    # Members lose access at once; to them the tenant no longer exists.
    for role in ("owner", "admin", "viewer"):
        assert clients[role].get(url).status_code == 404
        assert clients[role].get(f"{url}addressspaces/").status_code == 404
    assert tenant.slug not in [t["metadata"]["name"]
                               for t in clients["owner"].get("/api/v1/tenants/").json()["items"]]
    assert not Membership.objects.filter(tenant=tenant).exists()
    staff = client_for(make_user("sam", staff=True))
    assert staff.get(url).status_code == 404

    # The agent tears the broker side down, then the finalizer drops the space.
    assert rabbit.vhost_exists(live_space.vhost)
    runner.run(live_space.uid, "storage")
    assert not rabbit.vhost_exists(live_space.vhost)
    assert not AddressSpace.objects.filter(uid=live_space.uid).exists()
    with pytest.raises(ConnectionException):
        rabbit.connect(live_space.vhost, login, "app-password")

    # The audit trail stays, readable by staff, naming who deleted it.
    deleted = ConfigEvent.objects.get(tenant=tenant, type="tenant.deleted")
    assert deleted.actor.startswith("token:") and deleted.actor.endswith(":olivia")
    assert deleted.payload["members"] == ["adam", "olivia", "vera"]
    audit = staff.get("/api/v1/audit/", {"type": "tenant.deleted"}).json()["items"]
    assert [e["payload"]["slug"] for e in audit] == [tenant.slug]

    # The name is free again, for a new and empty tenant.
    again = clients["owner"].post("/api/v1/tenants/", {"kind": "Tenant",
                                                       "metadata": {"name": tenant.slug}},
                                  format="json")
    assert again.status_code == 201, again.content
    assert again.json()["metadata"]["uid"] != str(tenant.uid)
    assert clients["owner"].get(f"{url}addressspaces/").json()["items"] == []
    assert Tenant.objects.get(uid=tenant.uid).slug.startswith(f"{tenant.slug}~")


def test_the_name_stays_taken_while_address_spaces_are_torn_down(tenant, live_space, clients):
    assert clients["owner"].delete(f"/api/v1/tenants/{tenant.slug}/").status_code == 202
    again = clients["owner"].post("/api/v1/tenants/", {"kind": "Tenant",
                                                       "metadata": {"name": tenant.slug}},
                                  format="json")
    assert again.status_code == 409
    assert again.json()["field"] == "metadata.name"
    assert "being deleted" in again.json()["message"]
    runner.run(live_space.uid, "storage")
    assert clients["owner"].post("/api/v1/tenants/", {"kind": "Tenant",
                                                      "metadata": {"name": tenant.slug}},
                                 format="json").status_code == 201


def test_only_an_owner_or_staff_deletes_and_a_refusal_changes_nothing(tenant, clients):
    url = f"/api/v1/tenants/{tenant.slug}/"
    events = ConfigEvent.objects.count()
    assert clients["admin"].delete(url).status_code == 403
    assert clients["viewer"].delete(url).status_code == 403
    assert clients["outsider"].delete(url).status_code == 404
    assert clients["anonymous"].delete(url).status_code == 401
    assert ConfigEvent.objects.count() == events
    assert clients["owner"].get(url).status_code == 200


def test_no_address_space_is_created_in_a_deleted_tenant(tenant, owner):
    from tenants.services import delete_tenant

    stale = Tenant.objects.get(pk=tenant.pk)  # a request that looked the tenant up before
    delete_tenant(ctx=CTX, tenant=tenant)
    with pytest.raises(NotFound, match="being deleted"):
        services.create_address_space(ctx=CTX, tenant=stale, name="late", type="brokered",
                                      plan="brokered-single-broker")
    assert client_for(owner).post(f"/api/v1/tenants/{tenant.slug}/addressspaces/",
                                  space_manifest("late"), format="json").status_code == 404
