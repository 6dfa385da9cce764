"""The create path's hand-written statements (config_service/statements.py,
tenants/authentication.py) do what the ORM queries they replace did: the same instances, fields
decoded (JSON, UUIDs, times), related rows cached, nothing for a row that is missing, deleted
or someone else's, and the same rows written."""
import uuid

import psycopg
import pytest
from django.db import connection, transaction
from django.db.models import Exists, F, OuterRef
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from config_service import services, statements
from config_service.models import Address, AddressSpace, AgentState
from config_service.services import placement
from tenants.authentication import _live_token
from tenants.models import AddressPlan, AddressSpacePlan, PersonalAccessToken, Tenant, TenantQuota
from tests.conftest import CTX


def fields(obj) -> dict:
    return {f.attname: getattr(obj, f.attname) for f in obj._meta.concrete_fields}


def no_query(fn):
    """fn's answer, asserting that it ran no query (the related row came cached)."""
    with CaptureQueriesContext(connection) as ctx:
        out = fn()
    assert ctx.captured_queries == []
    return out


@pytest.fixture
def space(tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name="rows", type="standard",
                                      plan="standard-medium")
    services.create_address(ctx=CTX, space=s, address="q1", type="queue",
                            plan="standard-small-queue")
    services.create_address(ctx=CTX, space=s, address="a1", type="anycast",
                            plan="standard-small-anycast")
    return AddressSpace.objects.get(pk=s.pk)


def test_a_members_space_comes_with_its_tenant_and_role(space, tenant, owner, viewer, outsider):
    orm = (AddressSpace.objects.select_related("tenant")
           .filter(name="rows", tenant__slug=tenant.slug, tenant__deleted_at__isnull=True,
                   tenant__memberships__user=viewer)
           .annotate(member_role=F("tenant__memberships__role")).first())
    found = statements.member_space(viewer.pk, tenant.slug, "rows")

    assert fields(found) == fields(orm) and found.member_role == orm.member_role == "viewer"
    assert isinstance(found.uid, uuid.UUID) and isinstance(found.spec, dict)
    assert isinstance(found.plan_status, dict) and found.created_at.tzinfo is not None
    assert fields(no_query(lambda: found.tenant)) == fields(orm.tenant)
    assert statements.member_space(owner.pk, tenant.slug, "rows").member_role == "owner"
    assert statements.member_space(outsider.pk, tenant.slug, "rows") is None  # not a member
    assert statements.member_space(viewer.pk, tenant.slug, "nope") is None
    Tenant.objects.filter(pk=tenant.pk).update(deleted_at=timezone.now())
    assert statements.member_space(owner.pk, tenant.slug, "rows") is None


@pytest.mark.django_db(transaction=True)
def test_the_lock_holds_the_stream_and_the_space_is_read_with_tenant_and_quota(tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name="locked", type="brokered",
                                      plan="brokered-single-broker")
    with transaction.atomic():
        stream = statements.lock_stream(s.uid)
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:5432/"
                             f"{connection.settings_dict['NAME']}") as other:
            with pytest.raises(psycopg.errors.LockNotAvailable):  # another writer must wait
                other.execute("SELECT 1 FROM config_service_eventstream WHERE uid = %s "
                              "FOR UPDATE NOWAIT", (s.uid,))
        read = statements.space_with_quota(s.uid)
    assert stream.uid == s.uid and stream.last_sequence == read.last_sequence == 1
    assert stream.kind == "address_space" and stream.tenant_id == tenant.pk
    orm = AddressSpace.objects.select_related("tenant", "tenant__quota").get(uid=s.uid)
    assert fields(read) == fields(orm)
    assert fields(no_query(lambda: read.tenant.quota)) == fields(orm.tenant.quota)
    assert no_query(lambda: read.tenant.quota.tenant) is read.tenant

    TenantQuota.objects.filter(tenant=tenant).delete()  # no quota row: missing, as the ORM
    bare = statements.space_with_quota(s.uid)
    with pytest.raises(TenantQuota.DoesNotExist):
        no_query(lambda: bare.tenant.quota)
    assert statements.lock_stream(uuid.uuid4()) is None
    assert statements.space_with_quota(uuid.uuid4()) is None


def test_an_address_plan_says_whether_the_space_plan_offers_it(db):
    for name, space_plan in (("standard-small-queue", "standard-medium"),
                             ("brokered-queue", "standard-medium"),
                             ("brokered-queue", "brokered-single-broker")):
        offered = AddressSpacePlan.objects.filter(name=space_plan, address_plans=OuterRef("pk"))
        orm = AddressPlan.objects.filter(name=name).annotate(offered=Exists(offered)).get()
        plan = statements.address_plan(name, space_plan)
        assert fields(plan) == fields(orm) and plan.offered is orm.offered
        assert isinstance(plan.resources, dict)
    assert statements.address_plan("standard-small-queue", "standard-medium").offered
    assert not statements.address_plan("brokered-queue", "standard-medium").offered
    assert statements.address_plan("no-such-plan", "standard-medium") is None


def test_clashes_usage_and_the_quota_bound(space, tenant):
    assert statements.clashes(space.pk, "q1", "rows.other") == [("rows.q1", "q1")]
    assert sorted(statements.clashes(space.pk, "q1", "rows.a1")) == [("rows.a1", "a1"),
                                                                   ("rows.q1", "q1")]
    assert statements.clashes(space.pk, "new", "rows.new") == []

    orm = sorted(placement.usage_groups(Address.objects.filter(space=space)), key=str)
    assert sorted(statements.usage_groups(space.pk), key=str) == orm
    assert [g[0] for g in statements.usage_groups(space.pk, "rows.q1")] == ["anycast"]
    resources = statements.usage_groups(space.pk, "rows.q1")[0][1]
    assert resources == AddressPlan.objects.get(name="standard-small-anycast").resources

    assert statements.addresses_bound(tenant.pk) == 2  # three events, one space
    assert statements.addresses_count(tenant.pk) == 2
    assert statements.addresses_count(Tenant.objects.exclude(pk=tenant.pk).first().pk) == 0


def test_agent_states_by_uuid_or_text(space):
    other = uuid.uuid4()
    AgentState.objects.create(space_uid=space.uid, kind="router", applied_sequence=3,
                              address_errors={"rows.q1": "boom"}, applied_at=timezone.now())
    AgentState.objects.create(space_uid=other, kind="storage")
    orm = {(s.space_uid, s.kind): fields(s) for s in AgentState.objects.filter(
        space_uid__in=[space.uid])}
    read = statements.agent_states([space.uid])
    assert {(s.space_uid, s.kind): fields(s) for s in read} == orm
    assert read[0].address_errors == {"rows.q1": "boom"}
    assert len(statements.agent_states([str(space.uid), str(other)])) == 2
    assert statements.agent_states([]) == []


def test_a_token_comes_with_its_user_and_not_once_revoked(owner):
    pat = PersonalAccessToken.objects.create(user=owner, name="ci", digest="d" * 64)
    found = _live_token("d" * 64)
    assert fields(found) == fields(pat)
    assert no_query(lambda: found.user).username == owner.username
    PersonalAccessToken.objects.filter(pk=pat.pk).update(revoked=True)
    assert _live_token("d" * 64) is None
    assert _live_token("e" * 64) is None


def test_a_new_address_is_inserted_with_its_space_moved_on(space):
    orm = Address.objects.get(space=space, name="rows.q1")
    new = Address(**{f.attname: getattr(orm, f.attname) for f in Address._meta.concrete_fields
                     if not f.primary_key})
    new.name, new.address, new.placement = "rows.q2", "q2", [{"clusterId": "b1"}]
    at = timezone.now()
    saved = statements.insert_address(new, space.uid, 9, at)

    assert saved.pk is not None and not saved._state.adding
    read = Address.objects.get(pk=saved.pk)
    assert fields(read) == fields(saved) and read.placement == [{"clusterId": "b1"}]
    assert isinstance(read.plan_status, dict) and read.plan_status == orm.plan_status
    moved = AddressSpace.objects.get(pk=space.pk)
    assert (moved.last_sequence, moved.updated_at) == (9, at)
