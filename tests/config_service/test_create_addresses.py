"""A batch of addresses (services.create_addresses, behind an AddressList POST and
`manage.py fill_addresses`): the same rows, events and refusals as create_address item by item,
all or nothing, in a number of queries that does not grow with the batch."""
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from config_service import services
from config_service.models import Address, AddressSpace
from core.errors import Conflict, Invalid, QuotaExceeded
from eventlog.models import ConfigEvent, Outbox
from tenants.models import TenantQuota
from tests.conftest import CTX

# a standard space's mix, references inside the batch included
ITEMS = [
    {"address": "dlq", "type": "deadletter", "plan": "standard-deadletter"},
    {"address": "orders", "type": "queue", "plan": "standard-small-queue", "deadletter": "dlq",
     "expiry": "dlq", "spec": {"messageTtl": {"maximum": 60000}}},
    {"address": "news", "type": "topic", "plan": "standard-small-topic"},
    {"address": "news-all", "type": "subscription", "plan": "standard-small-subscription",
     "topic": "news", "spec": {"subscription": {"maxConsumers": 2}}},
    {"address": "big", "type": "queue", "plan": "standard-large-queue"},
    {"address": "big2", "type": "queue", "plan": "standard-large-queue"},
    *({"address": f"a{i}", "type": "anycast", "plan": "standard-small-anycast"}
      for i in range(5)),
    {"name": "{space}.m", "address": "m", "type": "multicast",
     "plan": "standard-small-multicast"},
]
ROW = ("name", "address", "type", "plan", "plan_status", "topic", "deadletter", "expiry",
       "spec", "scheduled", "pending_reason", "placement", "resource_version")


def items_for(space) -> list[dict]:
    return [{**item, "name": item["name"].format(space=space.name)} if "name" in item else item
            for item in ITEMS]


def rows(space) -> list[tuple]:
    return list(Address.objects.filter(space=space).order_by("resource_version")
                .values_list(*ROW))


def log_of(space) -> list[tuple]:
    def plain(payload):  # names carry the space's name
        return {k: (v.replace(space.name, "<space>") if isinstance(v, str) else v)
                for k, v in payload.items()}
    return [(e.sequence, e.type, plain(e.payload))
            for e in ConfigEvent.objects.filter(stream_id=space.uid).order_by("sequence")
            if e.type != "address_space.created"]  # its uid differs


def make_space(tenant, name, plan="standard-medium", type_="standard"):
    return services.create_address_space(ctx=CTX, tenant=tenant, name=name, type=type_,
                                         plan=plan)


def plain(rows_) -> list[tuple]:
    """Rows without the space's name in the resource names."""
    return [tuple(v.replace("batch.", "<s>.").replace("one.", "<s>.")
                  if isinstance(v, str) else v for v in row) for row in rows_]


def test_a_batch_gives_what_one_by_one_gives(tenant):
    one, batch = make_space(tenant, "one"), make_space(tenant, "batch")
    for item in items_for(one):
        services.create_address(ctx=CTX, space=one, **item)

    created = services.create_addresses(ctx=CTX, space=batch, items=items_for(batch))

    assert plain(rows(batch)) == plain(rows(one))
    assert log_of(batch) == log_of(one)
    assert [a.name for a in created] == [f"batch.{i['address']}" for i in ITEMS]
    space = AddressSpace.objects.get(pk=batch.pk)
    assert space.last_sequence == ConfigEvent.objects.filter(stream_id=batch.uid).count()
    assert Outbox.objects.filter(stream_uid=batch.uid).count() == len(ITEMS) + 1  # + the space


def test_a_credit_quota_leaves_the_same_items_pending_as_one_by_one(tenant):
    TenantQuota.objects.filter(tenant=tenant).update(max_credits=2)
    one = make_space(tenant, "one")
    for item in items_for(one):
        services.create_address(ctx=CTX, space=one, **item)
    expected = rows(one)
    services.delete_address_space(ctx=CTX, space=one)
    AddressSpace.objects.filter(pk=one.pk).delete()  # as the agents would once it is gone
    batch = make_space(tenant, "batch")
    services.create_addresses(ctx=CTX, space=batch, items=items_for(batch))

    got = plain(rows(batch))
    assert got == plain(expected)
    assert any(not r[ROW.index("scheduled")] for r in got)  # the quota did bite


@pytest.mark.parametrize("bad, error, field", [
    ({"address": "a0", "type": "anycast", "plan": "standard-small-anycast"}, Conflict,
     "items[2].spec.address"),                                     # twice in the list
    ({"address": "x", "type": "queue", "plan": "nope"}, Invalid, "items[2].spec.plan"),
    ({"address": "s", "type": "subscription", "plan": "standard-small-subscription",
      "topic": "missing"}, Invalid, "items[2].spec.topic"),
    ({"address": "q", "type": "queue", "plan": "standard-small-queue", "deadletter": "a0"},
     Invalid, "items[2].spec.deadletter"),                         # not a deadletter
    ({"address": "old", "type": "anycast", "plan": "standard-small-anycast"}, Conflict,
     "items[2].spec.address"),                                     # exists already
    ({"name": "x.y", "address": "y", "type": "anycast", "plan": "standard-small-anycast"},
     Invalid, "items[2].metadata.name"),
])
def test_one_bad_item_is_named_and_nothing_is_created(tenant, bad, error, field):
    space = make_space(tenant, "bad")
    services.create_address(ctx=CTX, space=space, address="old", type="anycast",
                            plan="standard-small-anycast")
    before = (list(Address.objects.values_list("name", flat=True)), ConfigEvent.objects.count())
    items = [{"address": "a0", "type": "anycast", "plan": "standard-small-anycast"},
             {"address": "a1", "type": "anycast", "plan": "standard-small-anycast"}, bad]
    with pytest.raises(error) as refused:
        services.create_addresses(ctx=CTX, space=space, items=items)
    assert refused.value.field == field
    assert refused.value.message.startswith("items[2]: ")
    assert (list(Address.objects.values_list("name", flat=True)),
            ConfigEvent.objects.count()) == before


def test_the_address_quota_counts_the_items_before(tenant):
    space = make_space(tenant, "quota")
    services.create_address(ctx=CTX, space=space, address="old", type="anycast",
                            plan="standard-small-anycast")
    TenantQuota.objects.filter(tenant=tenant).update(max_addresses=3)
    items = [{"address": f"a{i}", "type": "anycast", "plan": "standard-small-anycast"}
             for i in range(3)]
    with pytest.raises(QuotaExceeded) as refused:
        services.create_addresses(ctx=CTX, space=space, items=items)
    assert refused.value.field == "items[2].spec.address"
    assert len(services.create_addresses(ctx=CTX, space=space, items=items[:2])) == 2


def test_a_batch_takes_the_same_queries_however_long(tenant):
    space = make_space(tenant, "cost", plan="standard-unlimited")
    TenantQuota.objects.filter(tenant=tenant).update(max_credits=1000, max_addresses=100000)

    def queries(prefix, n):
        items = [{"address": f"{prefix}{i}", "type": "anycast", "plan": "standard-small-anycast"}
                 for i in range(n)]
        with CaptureQueriesContext(connection) as ctx:
            services.create_addresses(ctx=CTX, space=space, items=items)
        return len(ctx.captured_queries)

    assert queries("x", 5) == queries("y", 200)
