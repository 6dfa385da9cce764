"""Rotating the router's broker credential (manage.py rotate_secrets): the agents carry the new
one to RabbitMQ and the real embedded router, the old one stops working, and queues behind the
router keep every message."""
import time
import uuid

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.utils import timezone
from proton import ConnectionException, Message

from config_service import services
from config_service.models import AgentState
from tests.conftest import CTX, wait_for
from tests.workers import celery_queue, rabbit
from tests.workers.conftest import sync
from tests.workers.test_standard_space_e2e import connect, receive_bodies, user
from workers import credentials, dispatch, tasks
from workers.agents import runner

pytestmark = pytest.mark.slow
QUEUE = django_settings.CELERY_TASK_DEFAULT_QUEUE


@pytest.fixture
def space(tenant):
    s = services.create_address_space(ctx=CTX, tenant=tenant, name=f"rot{uuid.uuid4().hex[:5]}",
                                      type="standard", plan="standard-medium")
    services.create_address(ctx=CTX, space=s, address="orders", type="queue",
                            plan="standard-small-queue")
    user(s)
    sync(s)
    yield s
    services.delete_address_space(ctx=CTX, space=s)
    sync(s)


def test_a_rotated_router_credential_reaches_broker_and_router_and_messages_still_flow(
        router, space):
    conn = connect(router, space)
    conn.create_sender("orders").send(Message(body="before"))
    conn.close()
    old_user, old_password = credentials.router_broker(space.vhost)

    call_command("rotate_secrets", space=space.vhost)
    sync(space)  # what the wake-up sent by the command does in a worker

    new_user, new_password = credentials.router_broker(space.vhost)
    assert new_user != old_user and new_password != old_password
    with pytest.raises(ConnectionException):
        rabbit.connect(space.vhost, f"{old_user}@{space.vhost}", old_password).close()
    conn = connect(router, space)
    conn.create_sender("orders").send(Message(body="after"))
    receiver = conn.create_receiver("orders", credit=10)
    assert receive_bodies(receiver, 2, timeout=10) == ["before", "after"]
    conn.close()


def test_a_credential_lost_with_the_secret_key_heals_by_the_resync_alone(
        router, space, settings):
    """SECRET_KEY lost with var/, the platform restarted: the router agent's restore replaces
    the unreadable credential and gives its connector a login the broker does not know yet, so
    its autoLinks stay in error, to be retried. The storage controller, which would carry the
    login to RabbitMQ, had applied every event: only a drift check runs it. The space must not
    be kept out of its drift check by the errors the check would mend (at 100k, a restart
    from another var/ left the standard spaces in error: docs/scale.md)."""
    settings.SECRET_KEY = "another key, as after var/ was lost"
    settings.MAAS_RESYNC_INTERVAL = settings.MAAS_DRIFT_CHECK_PERIOD = 1.0
    router.restart()  # as the platform restarts: the router comes back empty
    runner.run(space.uid, "router")  # its restore (router_watch): the router agent alone
    new_user, _ = credentials.router_broker(space.vhost)
    assert new_user == "$router-2"
    assert AgentState.objects.get(space_uid=space.uid, kind="router").address_errors

    time.sleep(1.1)  # every state is now older than a resync interval
    for _ in range(3):  # resync ticks, their tasks run here as a worker runs them
        behind, drifting = tasks.resync_candidates(timezone.now())
        for uid in drifting:
            tasks.reconcile_space(str(uid), resync=True)
        for uid in set(behind) - set(drifting):  # queued once, as the check (resync_all)
            tasks.reconcile_space(str(uid), resync=True, only_behind=True)
    assert f"{new_user}@{space.vhost}" in rabbit.user_names()
    assert AgentState.objects.get(space_uid=space.uid, kind="router").address_errors == {}
    conn = connect(router, space)
    conn.create_sender("orders").send(Message(body="after"))
    receiver = conn.create_receiver("orders", credit=10)
    assert receive_bodies(receiver, 1, timeout=10) == ["after"]
    conn.close()


def test_a_credential_lost_with_the_secret_key_wakes_its_space_at_once(router, space, settings):
    """The router agent's restore replaces the unreadable login: the space's agents are woken
    then, as `rotate_secrets` wakes them, and that task alone carries the login to RabbitMQ.
    Left to the drift checks, the 100k fleet had not converged after 17 minutes; woken, it
    converged in 9 (docs/scale.md, "A lost secret key at 100k")."""
    settings.SECRET_KEY = "another key, as after var/ was lost"
    celery_queue.take_all(QUEUE)
    dispatch.claim(space.uid)
    router.restart()
    runner.run(space.uid, "router")  # its restore (router_watch): the router agent alone
    new_user, _ = credentials.router_broker(space.vhost)
    assert new_user == "$router-2"
    assert f"{new_user}@{space.vhost}" not in rabbit.user_names()

    woken = celery_queue.waiting(QUEUE, space.uid)
    assert len(woken) == 1
    celery_queue.take_all(QUEUE)
    tasks.reconcile_space(str(space.uid))  # what the agents' worker does with it
    assert f"{new_user}@{space.vhost}" in rabbit.user_names()

    def router_healed() -> bool:
        runner.run(space.uid, "router")  # its next run: a retry, or the task's own
        return not AgentState.objects.get(space_uid=space.uid, kind="router").address_errors

    wait_for(router_healed, 30, what="the router's autoLinks to attach with the new login")
    conn = connect(router, space)
    conn.create_sender("orders").send(Message(body="after"))
    receiver = conn.create_receiver("orders", credit=10)
    assert receive_bodies(receiver, 1, timeout=10) == ["after"]
    conn.close()
