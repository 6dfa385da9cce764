"""The embedded router's configuration journal (`--state-dir`): a router killed (SIGKILL) right
after management confirmed a change comes back with every confirmed change, before it listens,
and its clients work at once; a journal that cannot be trusted is set aside and the router
starts empty (the router watch then restores it). A real router process per test, real clients;
the journal class alone for its compaction and a failed write (to /dev/full, a real device)."""

import json
import os

import pytest
from proton import Message

from dataplane.router import config_journal as CJ
from dataplane.router import entities as E

from .conftest import ADDRESS, VHOST, RouterProcess, add_tenant, pump_until

pytestmark = pytest.mark.slow

TENANT = "cj"
USER, PASSWORD = "cj-user", "cj-password"  # unique: USERS is shared
GROUP = {"users": USER, "sources": "*", "targets": "*"}


@pytest.fixture
def state_dir(tmp_path):
    return tmp_path / "state"


@pytest.fixture
def router(state_dir):
    proc = RouterProcess(["--state-dir", str(state_dir)])
    proc.start()
    yield proc
    proc.stop()
    proc.own_auth.stop()


def kill(router) -> None:
    router.proc.kill()
    router.proc.wait()
    router.proc = None


def entities(router, etype: str) -> dict:
    mgmt = router.management()
    try:
        return {row["name"]: row for row in mgmt.query(etype)}
    finally:
        mgmt.close()


def round_trip(router, address: str) -> str:
    cr = router.connect(USER, PASSWORD, vhost=TENANT)
    cs = router.connect(USER, PASSWORD, vhost=TENANT)
    try:
        receiver = cr.create_receiver(address, credit=1)
        sender = cs.create_sender(address)
        pump_until(lambda: sender.link.credit > 0, cs, cr)
        sender.link.send(Message(body=f"to {address}"))
        pump_until(lambda: len(receiver.fetcher.incoming) == 1, cs, cr)
        return receiver.receive(5).body
    finally:
        cs.close()
        cr.close()


def test_a_killed_router_comes_back_with_every_confirmed_change(router):
    mgmt = router.management()
    add_tenant(mgmt, TENANT, {USER: PASSWORD}, {"all": GROUP}, maxConnections=50)
    for name in ("kept", "changed", "gone"):
        mgmt.create(ADDRESS, f"maas:{TENANT}:{name}", prefix=f"{TENANT}/{name}")
    mgmt.create(ADDRESS, "maas-watch", prefix="$maas-watch/token-1")
    assert mgmt.request("UPDATE", {"distribution": "multicast"}, type=ADDRESS,
                        name=f"maas:{TENANT}:changed")[0] == 200
    assert mgmt.request("UPDATE", {"maxConnections": 7}, type=VHOST, name=TENANT)[0] == 200
    assert mgmt.delete(ADDRESS, f"maas:{TENANT}:gone")[0] == 204
    mgmt.create(ADDRESS, f"maas:{TENANT}:last", prefix=f"{TENANT}/last")
    mgmt.close()
    kill(router)  # right after the last reply: no flush interval to wait for

    router.start()  # listening means restored
    assert round_trip(router, "last") == "to last"
    addresses = entities(router, ADDRESS)
    assert set(addresses) == {f"maas:{TENANT}:{n}" for n in ("kept", "changed", "last")} | {
        "maas-watch"}
    assert addresses["maas-watch"]["prefix"] == "$maas-watch/token-1"  # the watch's marker
    assert addresses[f"maas:{TENANT}:changed"]["distribution"] == "multicast"
    assert entities(router, VHOST)[TENANT]["maxConnections"] == 7
    # creation order is kept: it decides which of two matching entities wins
    identities = [int(addresses[f"maas:{TENANT}:{n}"]["identity"]) for n in ("kept", "last")]
    assert identities == sorted(identities)


def test_a_torn_last_line_is_dropped_and_a_bad_line_before_it_empties_the_router(
        router, state_dir):
    mgmt = router.management()
    mgmt.create(ADDRESS, "maas:cj2:a", prefix="cj2/a")
    mgmt.create(ADDRESS, "maas:cj2:b", prefix="cj2/b")
    mgmt.close()
    router.stop()
    journal = state_dir / CJ.FILE_NAME
    with journal.open("a") as f:
        f.write(f'["c","{ADDRESS}","maas:cj2:half",{{"pre')  # a kill mid-append
    router.start()
    assert set(entities(router, ADDRESS)) == {"maas:cj2:a", "maas:cj2:b"}
    mgmt = router.management()
    mgmt.create(ADDRESS, "maas:cj2:c", prefix="cj2/c")  # appended after the cut, whole
    mgmt.close()
    kill(router)
    router.start()
    assert set(entities(router, ADDRESS)) == {"maas:cj2:a", "maas:cj2:b", "maas:cj2:c"}

    router.stop()
    lines = journal.read_text().splitlines()
    lines.insert(1, "not json at all")
    journal.write_text("\n".join(lines) + "\n")
    router.start()
    assert entities(router, ADDRESS) == {}  # not half a configuration: the watch restores all
    assert "not json at all" in (state_dir / (CJ.FILE_NAME + ".corrupt")).read_text()


def test_the_journal_is_rewritten_with_only_what_exists_and_kept_private(tmp_path):
    journal = CJ.ConfigJournal(tmp_path)
    assert journal.load() == []
    journal.rewrite([])
    store = E.EntityStore()
    for n in range(5):
        journal.created(store.create(ADDRESS, f"a{n}", {"prefix": f"t/a{n}"}))
    store.update(store.find(ADDRESS, "a1"), {"distribution": "multicast"})
    journal.updated(store.find(ADDRESS, "a1"))
    for n in (0, 3):
        entity = store.find(ADDRESS, f"a{n}")
        store.delete(entity)
        journal.deleted(entity)
    journal.created(store.create(ADDRESS, "a0", {"prefix": "t/a0-again"}))
    journal.sync()
    assert journal.lines == 9
    found = CJ.ConfigJournal(tmp_path).load()
    assert [name for _, name, _ in found] == ["a1", "a2", "a4", "a0"]
    assert found[0][2]["distribution"] == "multicast" and found[3][2]["prefix"] == "t/a0-again"
    assert "operStatus" not in json.dumps(found)  # computed by the router, not configured

    journal.rewrite(sorted((e for e in store.all(ADDRESS)), key=lambda e: int(e["identity"])))
    assert journal.lines == 4
    assert [name for _, name, _ in CJ.ConfigJournal(tmp_path).load()] == ["a1", "a2", "a4",
                                                                           "a0"]
    assert os.stat(journal.path).st_mode & 0o777 == 0o600  # connectors' passwords are in it
    assert not journal.due(4)
    journal.lines = CJ.COMPACT_MIN + 1
    assert journal.due(4) and not journal.due(CJ.COMPACT_MIN)


def test_a_journal_that_cannot_be_written_is_removed_so_no_start_trusts_it(tmp_path):
    journal = CJ.ConfigJournal(tmp_path)
    journal.rewrite([])
    journal.created(E.EntityStore().create(ADDRESS, "a", {"prefix": "t/a"}))
    journal.sync()
    journal._file.close()
    journal._file = open("/dev/full", "a", encoding="utf-8")  # noqa: SIM115 - ENOSPC on flush
    journal.created(E.EntityStore().create(ADDRESS, "b", {"prefix": "t/b"}))
    journal.sync()
    assert not journal.path.exists()
    journal.created(E.EntityStore().create(ADDRESS, "c", {"prefix": "t/c"}))  # ignored
    journal.sync()
    assert not journal.path.exists() and CJ.ConfigJournal(tmp_path).load() == []
