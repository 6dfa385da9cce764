"""Full diffs on a router shared by spaces (workers/agents/router/tables.py): qdrouterd answers a
space's QUERY with every space's rows, so its full diffs start from one whole read stored for
every process, brought up to date by reading by name what runs touched since; the embedded
router filters by name and each space reads its own rows. A diff from the stored tables still
repairs what was gone before the read. Both routers (qdrouterd where `QDROUTERD` names a
build)."""
import logging
import threading
import time
import uuid

import pytest

from config_service import services
from config_service.models import AddressSpace
from tests.conftest import CTX
from tests.connectors import connectors_spec
from tests.workers.conftest import sync
from tests.workers.test_standard_space_e2e import add, phases, user
from workers.agents.router import desired as rc
from workers.agents.router import tables, touched
from workers.agents.router.agent import RouterAgent, features
from workers.agents.runner import run
from workers.tasks import read_router_tables

BOTH_ROUTERS = True


def make_space(tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"t{uuid.uuid4().hex[:5]}",
                                      type="standard", plan="standard-medium")
    for i in range(3):
        add(s, f"a{i}", "anycast", "standard-small-anycast")
    add(s, "orders", "queue", "standard-small-queue")
    sync(s)
    return s


@pytest.fixture
def spaces(tenant, mgmt, monkeypatch):
    # One host, one clock, and no request lands late: only what is touched after a read is
    # read again by name, so that the test can count it.
    monkeypatch.setattr(tables, "LOOKBACK_SECONDS", 0.0)
    made = [make_space(tenant), make_space(tenant)]
    tables.forget(mgmt.url)
    yield made
    tables.forget(mgmt.url)
    for s in made:
        if AddressSpace.objects.filter(uid=s.uid, terminating=False).exists():
            services.delete_address_space(ctx=CTX, space=s)
            sync(s)


def applied(caplog) -> list:
    """The router agent's `router.applied` records since the last call: what a diff changed."""
    found = [r for r in caplog.records if r.getMessage() == "router.applied"]
    caplog.clear()
    return found


def full_diff_reads(mgmt, space) -> int:
    """Entities read by a full diff of the space (nothing pending: what a drift check runs)."""
    features(mgmt, space.vhost)  # qdrouterd's listeners: read once per connection
    before = mgmt.rows_read
    run(space.uid, "router", RouterAgent(management=mgmt))
    return mgmt.rows_read - before


def test_full_diffs_on_a_shared_router_read_the_stored_tables(mgmt, router, spaces, tenant,
                                                              caplog):
    a, b = spaces
    own = len(mgmt.query(rc.ADDRESS, ["name"], name_prefix=rc.owner_prefix(a.vhost)))
    first = full_diff_reads(mgmt, a)
    gone = f"{rc.owner_prefix(a.vhost)}address:a0"
    mgmt.delete(rc.ADDRESS, gone)  # drift, before the read
    kept = read_router_tables()  # the resync queue's task, each minute
    caplog.set_level(logging.INFO, logger="workers.agents.router.agent")
    second = full_diff_reads(mgmt, b)
    assert not applied(caplog)  # the stored rows compare equal: nothing made again
    third = full_diff_reads(mgmt, a)
    assert [(r.n_deleted, r.n_changed, r.n_created) for r in applied(caplog)] == [(0, 0, 1)]

    if router.kind == "qdrouterd":
        assert tables.is_shared(mgmt.url)  # a's QUERY answered b's rows too
        assert first > 2 * own  # the whole router
        assert kept["rows"] > 2 * own and tables.refresh(mgmt) is None  # not due again yet
        assert second <= 1 and third <= 1  # the stored tables, and the watch marker's READ
    else:
        assert not tables.is_shared(mgmt.url) and kept == {}  # never read whole
        assert first == third + 1 >= own  # its own rows each time (one address fewer)
    assert mgmt.read(rc.ADDRESS, gone) is not None  # repaired from the tables all the same
    assert set(phases(a).values()) == {"Active"}

    # A new space, which has no state yet, starts from the stored tables too.
    c = services.create_address_space(ctx=CTX, tenant=tenant, name=f"t{uuid.uuid4().hex[:5]}",
                                      type="standard", plan="standard-medium")
    spaces.append(c)
    add(c, "c0", "anycast", "standard-small-anycast")
    run(c.uid, "storage")
    made = full_diff_reads(mgmt, c)
    assert made <= (1 if router.kind == "qdrouterd" else 0)
    assert set(phases(c).values()) == {"Active"}
    # Its teardown deletes from them too, what the tables never saw included.
    services.delete_address_space(ctx=CTX, space=c)
    sync(c)
    for etype in rc.ENTITY_TYPES:
        assert not mgmt.query(etype, ["name"], name_prefix=rc.owner_prefix(c.vhost)), etype

    # Changes of a's since the read, by runs of their own (as in another worker process): a
    # user (the vhost updated), an address made (the short path) and then deleted. The full
    # diff that deletes it starts from tables that never saw it, reads by name only what the
    # record of touched entities names since, and removes it all the same.
    user(a, "late")
    add(a, "late", "anycast", "standard-small-anycast")
    sync(a)
    late = f"{rc.owner_prefix(a.vhost)}address:late"
    assert mgmt.read(rc.ADDRESS, late) is not None
    services.delete_address(ctx=CTX, space=a, name=f"{a.name}.late")
    run(a.uid, "storage")
    reads = full_diff_reads(mgmt, a)
    assert mgmt.read(rc.ADDRESS, late) is None
    if router.kind == "qdrouterd":
        assert 2 <= reads <= 4  # the marker, the vhost and the late address: no whole read
    else:
        assert reads >= own
    vhost = mgmt.read(rc.VHOST, f"{rc.owner_prefix(a.vhost)}vhost")
    assert "late@" in str(vhost.get("groups"))
    assert set(phases(a).values()) == {"Active"}


def test_an_entity_the_tables_did_not_tell_is_read_by_name(mgmt, router, spaces):
    """Made by hand after the read (so neither in the tables nor touched by a run): the diff's
    CREATE of it is refused, and the diff is done again from reads by name, not from a whole
    read of the router."""
    a, _ = spaces
    name = f"{rc.owner_prefix(a.vhost)}address:a1"
    row = {k: v for k, v in mgmt.read(rc.ADDRESS, name).items()
           if k in ("prefix", "distribution", "waypoint")}
    mgmt.delete(rc.ADDRESS, name)
    full_diff_reads(mgmt, a)  # on qdrouterd its own QUERY: whole, and seen shared
    full_diff_reads(mgmt, a)  # it again, without a1 (made again; touched)
    mgmt.delete(rc.ADDRESS, name)
    read_router_tables()  # tables without a1, read after its last touch
    mgmt.create(rc.ADDRESS, name, row)  # by hand
    own = len(mgmt.query(rc.ADDRESS, ["name"], name_prefix=rc.owner_prefix(a.vhost)))
    reads = full_diff_reads(mgmt, a)
    if router.kind == "qdrouterd":
        assert reads < 4 * own  # the marker, then its own entities by name: not the router
    assert mgmt.read(rc.ADDRESS, name) is not None
    assert set(phases(a).values()) == {"Active"}


def test_tables_the_touch_record_cannot_vouch_for_are_not_used(mgmt, router, spaces):
    """Redis restarted empty or flushed: the record of what was touched since the read is gone,
    and a space's full diff reads the router anew rather than trust the stored tables (the
    embedded router: its own rows, always)."""
    a, b = spaces
    own = len(mgmt.query(rc.ADDRESS, ["name"], name_prefix=rc.owner_prefix(a.vhost)))
    full_diff_reads(mgmt, a)  # on qdrouterd, a's own QUERY answers every space's rows
    tables.refresh(mgmt)
    kept = full_diff_reads(mgmt, a)
    touched.client().delete(touched.EPOCH_PREFIX + mgmt.url)
    again = full_diff_reads(mgmt, a)
    if router.kind == "qdrouterd":
        assert kept <= 1 and again > 2 * own  # from the tables, then the whole router again
    else:
        assert kept >= own and again >= own
    assert set(phases(a).values()) == {"Active"}


def test_the_kept_attributes_are_every_one_a_diff_compares(tenant, settings, tmp_path):
    """tables.py keeps only rc.ATTRIBUTES of each row: one that desired_entities writes and
    it did not keep would read as a difference and have its entity made again."""
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"k{uuid.uuid4().hex[:5]}",
                                      type="standard", plan="standard-medium")
    for name, kind, plan in (("any", "anycast", "standard-small-anycast"),
                             ("multi", "multicast", "standard-small-multicast"),
                             ("q", "queue", "standard-small-queue"),
                             ("news", "topic", "standard-small-topic")):
        add(s, name, kind, plan)
    services.create_address(ctx=CTX, space=s, address="news-sub", type="subscription",
                            plan="standard-small-subscription", topic="news")
    user(s, "app")
    settings.MAAS_CONNECTOR_TLS_DIR = str(tmp_path)
    s.spec = connectors_spec()  # spec.connectors, as only qdrouterd takes them
    addresses = list(s.addresses.filter(scheduled=True)) or list(s.addresses.all())
    login = rc.BrokerLogin("127.0.0.1", 5672, "router@x", "secret")
    written: dict = {}
    for feats in (rc.EMBEDDED, rc.RouterFeatures(connector_virtual_host=False,
                                                 keeps_counters=False,
                                                 exact_message_targets=False,
                                                 serves_one_space=True)):
        desired, _ = rc.desired_entities(s, addresses, list(s.users.all()), login,
                                         throttled=False, plan_policy={"maxConnections": 5},
                                         features=feats)
        for (etype, _), attributes in desired.items():
            written.setdefault(etype, set()).update(attributes)
    assert set(written) == set(rc.ENTITY_TYPES)
    for etype, names in written.items():
        assert names - rc.WRITE_ONLY <= rc.ATTRIBUTES[etype], etype


def test_a_read_keeps_its_lock_however_long_it_takes(monkeypatch):
    """A whole read outlasting READ_LOCK_SECONDS (qdrouterd at 100,000 addresses under load)
    still holds the lock, so the next tick's task does not begin a second read beside it; a
    lock another reader took over is left to it."""
    monkeypatch.setattr(tables, "READ_LOCK_RENEW", 0.05)
    client, lock = touched.client(), f"maas:test:tables-lock:{uuid.uuid4().hex}"
    client.set(lock, "mine", ex=1)
    done = threading.Event()
    holder = threading.Thread(target=tables._hold, args=(client, lock, "mine", done))
    holder.start()
    try:
        past = time.monotonic() + 1.5  # half as long again as the lock's own expiry
        while time.monotonic() < past:
            assert client.get(lock) == b"mine"
            time.sleep(0.05)
    finally:
        done.set()
        holder.join(5)
    assert not holder.is_alive()

    client.set(lock, "another's", ex=1)
    done = threading.Event()
    holder = threading.Thread(target=tables._hold, args=(client, lock, "mine", done))
    holder.start()
    holder.join(5)  # it sees the lock is not its own and stops
    assert not holder.is_alive() and not done.is_set()
    client.delete(lock)
