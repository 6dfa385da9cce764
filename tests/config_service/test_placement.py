"""Placement with a bound per broker (MAAS_BROKER_MAX_SPACES, docs/storage.md): new spaces
spread over the pool, no broker takes more than the bound, and a space that finds every broker
full is refused with a 503 that says so, leaving nothing behind. Placement alone: no broker is
asked here (the spaces' vhosts: tests/workers/test_broker_pool.py)."""
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from config_service import services
from config_service.models import AddressSpace
from core.errors import Unavailable
from eventlog.models import ConfigEvent
from tenants.models import Tenant
from tests.conftest import CTX, space_manifest


def url(tenant):
    return f"/api/v1/tenants/{tenant.slug}/addressspaces/"


def test_spaces_spread_up_to_the_bound_then_a_new_one_is_refused_and_changes_nothing(
        tenant, clients, settings):
    settings.MAAS_RABBITMQ_NODES = 2
    settings.MAAS_BROKER_MAX_SPACES = 2
    for name in "abcd":
        answer = clients["owner"].post(url(tenant), space_manifest(name), format="json")
        assert answer.status_code == 201, answer.json()
    placed = dict(AddressSpace.objects.filter(tenant=tenant).values_list("name", "broker"))
    assert placed == {"a": "", "b": "maas1", "c": "", "d": "maas1"}
    events = ConfigEvent.objects.count()

    answer = clients["owner"].post(url(tenant), space_manifest("e"), format="json")
    assert answer.status_code == 503
    assert answer.json()["code"] == "unavailable"
    assert "No broker of this installation has room" in answer.json()["message"]
    assert not AddressSpace.objects.filter(tenant=tenant, name="e").exists()
    assert ConfigEvent.objects.count() == events

    settings.MAAS_BROKER_MAX_SPACES = 0  # no bound: the broker with the fewest spaces
    assert clients["owner"].post(url(tenant), space_manifest("e"), format="json").status_code \
        == 201
    assert AddressSpace.objects.get(tenant=tenant, name="e").broker == ""


def test_a_single_broker_has_the_bound_too(tenant, clients, settings):
    settings.MAAS_RABBITMQ_NODES = 1
    settings.MAAS_BROKER_MAX_SPACES = 1
    assert clients["owner"].post(url(tenant), space_manifest("a"), format="json").status_code \
        == 201
    assert clients["owner"].post(url(tenant), space_manifest("b"), format="json").status_code \
        == 503


@pytest.mark.django_db(transaction=True)
def test_two_creations_at_once_never_both_take_the_last_place(tenant, outsider, settings):
    """Each placement holds an advisory lock until its creation commits: the second creation
    waits for it and counts its space. Two tenants: one tenant's creations already take turns
    (its row is locked for the quota check). Without the lock both counted none and both were
    placed."""
    settings.MAAS_RABBITMQ_NODES = 1
    settings.MAAS_BROKER_MAX_SPACES = 1
    other = Tenant.objects.get(memberships__user=outsider)
    start = threading.Barrier(2)

    def create(owner):
        start.wait()
        try:
            services.create_address_space(ctx=CTX, tenant=owner, name="x", type="brokered",
                                          plan="brokered-single-broker")
            return "placed"
        except Unavailable:
            return "refused"
        finally:
            connection.close()

    with ThreadPoolExecutor(2) as pool:
        outcomes = sorted(pool.map(create, [tenant, other]))
    assert outcomes == ["placed", "refused"]
    assert AddressSpace.objects.filter(name="x").count() == 1
