"""The embedded router's entity indexes give exactly what a scan of every entity gave: owner
lookups, vhost by hostname, autoLinks by connector and qdrouterd's address precedence."""
import random

import pytest

from dataplane.router import entities as E
from dataplane.router.patterns import best_match


def test_candidates_choose_what_a_scan_chooses():
    rng = random.Random(7)
    tokens = ["a", "b", "c", "ab", "*", "#"]
    store = E.EntityStore()
    for i in range(400):
        words = [rng.choice(tokens) for _ in range(rng.randint(1, 4))]
        sep = rng.choice("./")
        text = sep.join(words)
        try:
            if "*" in words or "#" in words or rng.random() < 0.3:
                store.create(E.ADDRESS, f"maas:v{i % 5}:p{i}", {"pattern": text})
            else:
                store.create(E.ADDRESS, f"maas:v{i % 5}:x{i}", {"prefix": text})
        except E.EntityError:
            pass  # the same prefix twice: refused, as qdrouterd does
    for name in [e["name"] for e in store.all(E.ADDRESS)][::3]:
        store.delete(store.find(E.ADDRESS, name))  # the index forgets what is deleted
    plain = ["a", "b", "c", "ab", "zz"]
    for _ in range(2000):
        address = rng.choice("./").join(rng.choice(plain) for _ in range(rng.randint(1, 5)))
        # the index narrows what the precedence looks at, never what it chooses
        assert best_match(store.candidates(E.ADDRESS, address), address) is best_match(
            store.all(E.ADDRESS), address)


def test_owner_index_follows_creates_and_deletes():
    store = E.EntityStore()
    for v in range(3):
        for i in range(4):
            store.create(E.ADDRESS, f"maas:t.s{v}:address:q{i}", {"prefix": f"t.s{v}/q{i}"})
    store.create(E.ADDRESS, "other", {"prefix": "elsewhere"})
    assert {e["name"] for e in store.owned(E.ADDRESS, "maas:t.s1:")} == {
        f"maas:t.s1:address:q{i}" for i in range(4)}
    store.delete(store.find(E.ADDRESS, "maas:t.s1:address:q0"))
    assert len(store.owned(E.ADDRESS, "maas:t.s1:")) == 3
    assert store.owned(E.ADDRESS, "maas:t.s9:") == []
    # a prefix that is no owner is answered by a scan, with the same meaning
    assert {e["name"] for e in store.owned(E.ADDRESS, "maas:t.s2:address:q")} == {
        f"maas:t.s2:address:q{i}" for i in range(4)}


def test_vhost_by_hostname_follows_updates_and_autolinks_by_connector():
    store = E.EntityStore()
    vhost = store.create(E.VHOST, "maas:a:vhost", {"hostname": "a"})
    assert store.vhost("a") is vhost
    store.update(vhost, {"hostname": "b"})
    assert store.vhost("a") is None and store.vhost("b") is vhost
    store.delete(vhost)
    assert store.vhost("b") is None
    store.create(E.AUTO_LINK, "maas:a:al", {"address": "a/q", "direction": "in",
                                             "connection": "maas:a:broker"})
    store.create(E.AUTO_LINK, "maas:b:al", {"address": "b/q", "direction": "in",
                                             "connection": "maas:b:broker"})
    store.create(E.AUTO_LINK, "by-container", {"address": "c/q", "direction": "in",
                                                "containerId": "broker-c"})
    assert [e["name"] for e in store.autolinks_of("maas:a:broker")] == ["maas:a:al",
                                                                         "by-container"]


def test_an_address_configuration_per_prefix_and_pattern_only_once():
    store = E.EntityStore()
    store.create(E.ADDRESS, "one", {"prefix": "t/q"})
    store.create(E.ADDRESS, "two", {"pattern": "t/q"})  # a pattern is another configuration
    for attrs in ({"prefix": "t/q"}, {"pattern": "t/q"}):
        with pytest.raises(E.EntityError, match="Already exists"):
            store.create(E.ADDRESS, "three", attrs)
    store.delete(store.find(E.ADDRESS, "one"))
    store.create(E.ADDRESS, "three", {"prefix": "t/q"})
