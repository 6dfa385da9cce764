"""The cheap create path: usage counted in groups by the database, the tenant's credits in one
query, plans and name clashes in one query each; same answers as row by row."""
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from config_service import scheduling, services
from config_service.models import Address, AddressSpace
from config_service.services import addresses, placement
from core.errors import Conflict, Invalid, QuotaExceeded
from tenants.models import TenantQuota
from tests.conftest import CTX


def rowwise_usage(space, exclude=""):
    rows = (Address.objects.filter(space=space, scheduled=True).exclude(name=exclude)
            .values_list("type", "plan_status", "placement"))
    return scheduling.usage_of(rows)


def rowwise_tenant_credits(tenant, exclude_space):
    total = 0.0
    for other in AddressSpace.objects.filter(tenant=tenant).exclude(pk=exclude_space.pk):
        needed = rowwise_usage(other).needed()
        total += needed["router"] + needed["broker"]
    return total


def same(a: scheduling.Usage, b: scheduling.Usage) -> bool:
    pooled_a = {k: round(v, 9) for k, v in a.pooled.items() if v}
    pooled_b = {k: round(v, 9) for k, v in b.pooled.items() if v}
    return (round(a.router, 9) == round(b.router, 9) and pooled_a == pooled_b
            and a.sharded == b.sharded and a.needed() == b.needed())


@pytest.fixture
def spaces(tenant):
    std = services.create_address_space(ctx=CTX, tenant=tenant, name="ss", type="standard",
                                        plan="standard-medium")
    other = services.create_address_space(ctx=CTX, tenant=tenant, name="so", type="standard",
                                          plan="standard-small")
    brk = services.create_address_space(ctx=CTX, tenant=tenant, name="bs", type="brokered",
                                        plan="brokered-single-broker")
    return std, other, brk


def add(space, address, type_, plan, **kw):
    return services.create_address(ctx=CTX, space=space, address=address, type=type_,
                                   plan=plan, **kw)


def test_grouped_usage_equals_row_by_row(spaces, tenant):
    std, other, brk = spaces
    for i in range(7):
        add(std, f"q{i}", "queue", "standard-small-queue")
    add(std, "pq", "queue", "standard-medium-partitioned-queue")
    add(std, "big", "queue", "standard-large-queue")
    add(std, "t", "topic", "standard-large-topic")
    add(std, "s", "subscription", "standard-small-subscription", topic="t")
    add(std, "any", "anycast", "standard-small-anycast")
    add(std, "dlq", "deadletter", "standard-deadletter")
    add(other, "o1", "queue", "standard-medium-queue")
    add(other, "o2", "anycast", "standard-large-anycast")
    for i in range(3):
        add(brk, f"b{i}", "queue", "brokered-queue")
    for space in (std, other, brk):
        assert same(placement.space_usage(space), rowwise_usage(space))
        assert same(placement.space_usage(space, exclude="ss.q3"), rowwise_usage(space, "ss.q3"))
    for space in (std, other, brk):
        assert placement.tenant_credits(tenant, space) == rowwise_tenant_credits(tenant, space)
    assert placement.tenant_credits(tenant, brk) > 0


def test_usage_groups_add_counts():
    plan = {"resources": {"router": 0.01, "broker": 0.1}}
    placement = [{"clusterId": "broker-0"}]
    one_by_one = scheduling.usage_of([("queue", plan, placement)] * 10)
    grouped = scheduling.usage_of_groups([("queue", plan["resources"], placement, 10)])
    assert same(one_by_one, grouped) and grouped.needed() == {"router": 1, "broker": 1}
    assert scheduling.usage_of_groups([("subscription", plan["resources"], placement, 3),
                                       ("anycast", None, [], 2)]).needed() == {
        "router": 1, "broker": 0}


def test_tenant_credit_quota_still_holds(spaces, tenant):
    std, other, _ = spaces
    add(other, "o1", "queue", "standard-large-queue")  # `so` needs 1 router + 1 broker
    TenantQuota.objects.filter(tenant=tenant).update(max_credits=3)
    # A queue in `ss` needs 1 router + 1 broker more: 4 credits > 3, so it waits.
    pending = add(std, "a", "queue", "standard-small-queue")
    assert (pending.scheduled, pending.pending_reason) == (False, "Quota exceeded")
    TenantQuota.objects.filter(tenant=tenant).update(max_credits=4)
    assert add(std, "b", "queue", "standard-small-queue").scheduled


def test_create_refuses_clashes_plans_and_the_address_quota_as_before(spaces, tenant):
    _, _, brk = spaces
    add(brk, "orders", "queue", "brokered-queue")
    with pytest.raises(Conflict) as clash:
        services.create_address(ctx=CTX, space=brk, name="bs.other", address="orders",
                                type="queue", plan="brokered-queue")
    assert "resource name 'bs.orders'" in clash.value.args[0]
    with pytest.raises(Conflict) as same_name:
        services.create_address(ctx=CTX, space=brk, name="bs.orders", address="orders2",
                                type="queue", plan="brokered-queue")
    assert same_name.value.args[0] == "Address 'bs.orders' already exists"
    with pytest.raises(Invalid, match="unknown address plan"):
        add(brk, "x", "queue", "nope")
    with pytest.raises(Invalid, match="is for topic addresses"):
        add(brk, "x", "queue", "brokered-topic")
    with pytest.raises(Invalid, match="not offered by address space plan"):
        add(brk, "x", "queue", "standard-small-queue")
    TenantQuota.objects.filter(tenant=tenant).update(max_addresses=1)
    with pytest.raises(QuotaExceeded, match="Tenant quota of 1 addresses"):
        add(brk, "x", "queue", "brokered-queue")


def test_create_takes_the_same_few_queries_however_many_addresses(spaces, tenant):
    _, _, brk = spaces
    TenantQuota.objects.filter(tenant=tenant).update(max_credits=1000)

    def queries(address):
        with CaptureQueriesContext(connection) as ctx:
            add(brk, address, "queue", "brokered-queue")
        return len(ctx.captured_queries)

    first = queries("first")
    for i in range(30):
        add(brk, f"q{i}", "queue", "brokered-queue")
    assert queries("last") == first


def test_the_address_quota_counts_only_near_the_limit(spaces, tenant):
    std, other, brk = spaces
    TenantQuota.objects.filter(tenant=tenant).update(max_addresses=4)

    def counted(address, space=brk):
        with CaptureQueriesContext(connection) as ctx:
            add(space, address, "queue", "brokered-queue" if space == brk else
                "standard-small-queue")
        return any("COUNT(*)" in q["sql"] and '"config_service_address"' in q["sql"]
                   for q in ctx.captured_queries)

    assert not counted("a") and not counted("b")  # far from the limit: no count
    services.update_address(ctx=CTX, space=brk, name="bs.a", spec={"messageTtl": {
        "maximum": 1000}})
    services.delete_address(ctx=CTX, space=brk, name="bs.b")
    # Now the events bound the addresses at 3 (one is there): counted exactly, and allowed.
    assert counted("c")
    assert counted("d", std)
    assert addresses._addresses_reach(tenant, 3) and not addresses._addresses_reach(tenant, 4)
    assert counted("e")  # the fourth address
    with pytest.raises(QuotaExceeded, match="Tenant quota of 4 addresses"):
        add(other, "f", "queue", "standard-small-queue")
    assert Address.objects.filter(space__tenant=tenant).count() == 4


def test_an_api_create_reads_each_row_once(spaces, tenant, api):
    """One address through the API: the token; the space with its tenant and the member's
    role (one query); under the stream lock the space again with its tenant and quota, the
    plan, the name clash, the quota's bound, the usage; the writes (the stream's sequence, the
    event and its outbox row in one statement, then the address with its space's sequence in
    another); the agents' states for
    the answer. Each round trip more waits for a core again on a loaded machine. The answer
    is the row inserted, as a GET then reads it."""
    std, _, _ = spaces
    url = f"/api/v1/tenants/{tenant.slug}/addressspaces/{std.name}/addresses/"

    def create(name):
        body = {"metadata": {"name": f"ss.{name}"},
                "spec": {"address": name, "type": "anycast", "plan": "standard-small-anycast"}}
        with CaptureQueriesContext(connection) as ctx:
            created = api.post(url, body, format="json")
        assert created.status_code == 201, created.content
        return created.json(), [q["sql"] for q in ctx.captured_queries]

    create("first")  # the token's last use is recorded once a while: not in the count
    created, sql = create("orders")
    assert len(sql) == 13, "\n".join(sql)  # 11 and the savepoint's two (a test's transaction)
    assert not any(q.startswith(('SELECT "tenants_tenant"', 'SELECT "tenants_membership"'))
                   for q in sql)  # with the space
    assert sum(q.lstrip().startswith("SELECT") and '"config_service_addressspace"' in q
               and 'JOIN "tenants_tenant"' in q for q in sql) == 2
    assert sum(q.lstrip().startswith(("INSERT", "UPDATE", "WITH")) for q in sql) == 2
    assert not any('FROM "tenants_tenantquota"' in q for q in sql)  # with the locked space
    inserted = next(i for i, q in enumerate(sql) if 'INSERT INTO "config_service_address"' in q)
    assert not any('FROM "config_service_address"' in q for q in sql[inserted:])  # not read back
    assert api.get(url + "ss.orders/").json() == created
