"""The agents of a standard space run at once for changes that need nothing of the broker
first, and one after the other (storage, then router) for everything else."""
import threading
import uuid

import pytest

from config_service import services
from config_service.models import AddressSpace
from tests.conftest import CTX, b64
from tests.workers.conftest import sync
from tests.workers.test_standard_space_e2e import add, phases
from workers import tasks
from workers.agents import base
from workers.storage import controller


@pytest.fixture
def space(tenant, router, redis_server):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"ord{uuid.uuid4().hex[:5]}",
                                      type="standard", plan="standard-medium")
    sync(s)
    yield s
    if AddressSpace.objects.filter(uid=s.uid, terminating=False).exists():
        services.delete_address_space(ctx=CTX, space=s)
        sync(s)


@pytest.fixture
def runs(monkeypatch):
    """(agent kind, thread) of every agent run of reconcile_space."""
    seen = []
    real = base.run

    def run(space_uid, kind, *args, **kwargs):
        seen.append((kind, threading.current_thread()))
        return real(space_uid, kind, *args, **kwargs)

    monkeypatch.setattr(base, "run", run)
    return seen


def test_router_only_changes_run_the_agents_at_once(space):
    add(space, "a1", "anycast", "standard-small-anycast")
    add(space, "m1", "multicast", "standard-small-multicast")
    services.create_messaging_user(ctx=CTX, space=space, username="app",
                                   authentication={"type": "password", "password": b64("app-password")},
                                   authorization=[{"addresses": ["*"],
                                                   "operations": ["send", "recv"]}])
    assert tasks._router_only(space.uid)
    add(space, "q1", "queue", "standard-small-queue")
    assert not tasks._router_only(space.uid)  # its autoLinks need the broker's queue first


def test_a_resync_keeps_the_order(space):
    assert not tasks._router_only(space.uid)  # nothing new: a drift check


def test_an_anycast_change_runs_both_agents_each_in_its_thread(space, runs):
    add(space, "fast", "anycast", "standard-small-anycast")
    tasks.reconcile_space(str(space.uid))
    assert phases(space) == {"fast": "Active"}
    assert sorted(kind for kind, _ in runs) == ["router", "storage"]
    assert all(thread is not threading.main_thread() for _, thread in runs)
    assert runs[0][1] is not runs[1][1]
    add(space, "stored", "queue", "standard-small-queue")
    runs.clear()
    tasks.reconcile_space(str(space.uid))
    assert [kind for kind, _ in runs] == ["storage", "router"]  # in order, in this thread
    assert all(thread is threading.main_thread() for _, thread in runs)


def test_the_agents_threads_keep_their_database_sessions(space, monkeypatch):
    """A session per agent per change cost PostgreSQL a backend start each time (three per
    anycast create, about as much CPU as the reconcile): the pool's threads keep theirs."""
    sessions = []
    real = base.run

    def run(space_uid, kind, *args, **kwargs):
        from django.db import connection

        result = real(space_uid, kind, *args, **kwargs)
        sessions.append((threading.current_thread(), connection.connection.info.backend_pid))
        return result

    monkeypatch.setattr(base, "run", run)
    for name in ("k1", "k2", "k3"):
        add(space, name, "anycast", "standard-small-anycast")
        tasks.reconcile_space(str(space.uid))
    assert phases(space) == {"k1": "Active", "k2": "Active", "k3": "Active"}
    first = set(sessions[:2])
    assert len(sessions) == 6 and set(sessions[2:]) <= first  # the same threads, same backends


def test_the_storage_agent_asks_the_broker_only_when_something_stored_changed(
        space, monkeypatch):
    asked = []
    real = controller._api
    monkeypatch.setattr(controller, "_api", lambda s: asked.append(s.name) or real(s))
    add(space, "a2", "anycast", "standard-small-anycast")
    add(space, "m2", "multicast", "standard-small-multicast")
    base.run(space.uid, "storage")
    assert asked == []  # nothing of the broker changes
    base.run(space.uid, "router")
    assert set(phases(space).values()) == {"Active"}
    add(space, "q2", "queue", "standard-small-queue")
    base.run(space.uid, "storage")
    assert asked == [space.name]
    base.run(space.uid, "storage")  # no new event: a resync, which checks the broker
    assert asked == [space.name, space.name]
