"""The periodic resync: it queues, in a queue of its own, the spaces whose agents are behind and
a share of the quiet ones (longest unchecked first), never every space; a wake-up is never
skipped."""
import datetime
import uuid

import pytest
from django.conf import settings
from django.utils import timezone

from config_service import services
from config_service.models import AgentState
from tests.conftest import CTX
from tests.workers import celery_queue, rabbit
from workers.agents import runner
from workers.tasks import (
    QUICK_RETRIES,
    drift_check_countdowns,
    reconcile_space,
    resync_all,
    retry_countdown,
)

RESYNC = settings.MAAS_RESYNC_QUEUE


def new_space(tenant, name=None):
    return services.create_address_space(ctx=CTX, tenant=tenant,
                                         name=name or f"s{uuid.uuid4().hex[:6]}",
                                         type="brokered", plan="brokered-single-broker")


def queue(space, name):
    services.create_address(ctx=CTX, space=space, address=name, type="queue",
                            plan="brokered-queue")


@pytest.fixture
def spaces(redis_server, tenant):
    """Four reconciled spaces: two quiet for an hour, one checked just now, one with a change
    its agent has not applied yet."""
    made = {name: new_space(tenant, name) for name in ("quiet", "quieter", "fresh", "behind")}
    for s in made.values():
        runner.run(s.uid, "storage")
    # Each compared whole with the broker when it last applied (a space's first apply is a
    # change's, not yet a drift check: `checked_at` is set here)
    an_hour_ago, now = timezone.now() - datetime.timedelta(hours=1), timezone.now()
    AgentState.objects.filter(space_uid=made["fresh"].uid).update(checked_at=now)
    AgentState.objects.filter(space_uid=made["behind"].uid).update(checked_at=now)
    AgentState.objects.filter(space_uid=made["quiet"].uid).update(applied_at=an_hour_ago,
                                                                  checked_at=an_hour_ago)
    AgentState.objects.filter(space_uid=made["quieter"].uid).update(
        applied_at=an_hour_ago - datetime.timedelta(minutes=1),
        checked_at=an_hour_ago - datetime.timedelta(minutes=1))
    queue(made["behind"], "orders")
    yield made
    for s in made.values():
        services.delete_address_space(ctx=CTX, space=s)
        runner.run(s.uid, "storage")


def resync_tasks(spaces) -> dict[str, dict]:
    names = {str(s.uid): name for name, s in spaces.items()}
    return {names[args[0]]: kwargs for _, args, kwargs in celery_queue.waiting(RESYNC)
            if args[0] in names}


def test_resync_skips_up_to_date_spaces_but_for_a_share_of_drift_checks(spaces):
    celery_queue.take_all(RESYNC)
    resync_all()
    # One drift check per run for four spaces (a share of 1/5, rounded up): the longest quiet.
    assert resync_tasks(spaces) == {
        "behind": {"resync": True, "only_behind": True},
        "quieter": {"resync": True, "only_behind": False},
    }


def test_a_space_behind_and_due_its_drift_check_is_queued_once_as_the_check_at_once(
        spaces, settings):
    """The check runs every agent, those behind too: one task, not a repair besides, and not
    put off by the spreading of the checks over the interval."""
    settings.MAAS_DRIFT_CHECK_PERIOD = settings.MAAS_RESYNC_INTERVAL  # every due space
    AgentState.objects.filter(space_uid=spaces["behind"].uid).update(
        checked_at=timezone.now() - datetime.timedelta(hours=3))
    celery_queue.take_all(RESYNC)
    resync_all()
    assert resync_tasks(spaces)["behind"] == {"resync": True, "only_behind": False}
    assert celery_queue.etas(RESYNC)[str(spaces["behind"].uid)] is None
    assert [args[0] for _, args, _ in celery_queue.waiting(RESYNC)].count(
        str(spaces["behind"].uid)) == 1


def test_a_tick_spreads_its_drift_checks_over_the_interval_but_repairs_at_once(spaces,
                                                                              settings):
    """With a drift period of one interval every quiet space is due: the longest unchecked at
    once, the next ones later, none after the next tick; the space behind at once."""
    settings.MAAS_DRIFT_CHECK_PERIOD = settings.MAAS_RESYNC_INTERVAL
    celery_queue.take_all(RESYNC)
    before = timezone.now()
    resync_all()
    etas = celery_queue.etas(RESYNC)
    due = {name: etas[str(s.uid)] for name, s in spaces.items() if name != "fresh"}
    assert due["behind"] is None and due["quieter"] is None
    quiet_at = datetime.datetime.fromisoformat(due["quiet"])
    assert before < quiet_at < before + datetime.timedelta(seconds=settings.MAAS_RESYNC_INTERVAL)


@pytest.mark.parametrize("interval, n, countdowns", [
    (60.0, 0, []), (60.0, 1, [0.0]), (60.0, 4, [0.0, 15.0, 30.0, 45.0]),
    (600.0, 2, [0.0, 75.0]),  # within half the visibility timeout (300 s here): never redelivered
])
def test_drift_checks_are_due_evenly_over_the_interval(settings, interval, n, countdowns):
    settings.MAAS_RESYNC_INTERVAL = interval
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 300}
    assert drift_check_countdowns(n) == countdowns


def test_a_router_restarting_is_retried_within_a_second_and_anything_else_backs_off():
    """A target expected back soon (RouterUnreachable): 0.25, 0.5, then 1 s apart (less up to a
    quarter) for QUICK_RETRIES tries, then the doubling backoff; anything else doubles at once,
    both up to a minute, with full jitter."""
    quick = [retry_countdown(n, soon=True) for n in range(QUICK_RETRIES)]
    assert 0.1875 <= quick[0] <= 0.25 and 0.375 <= quick[1] <= 0.5
    assert all(0.75 <= c <= 1.0 for c in quick[2:])
    for n in range(12):
        assert 0 <= retry_countdown(QUICK_RETRIES + n, soon=True) <= min(60, 2 ** n)
        assert 0 <= retry_countdown(n, soon=False) <= min(60, 2 ** n)
    assert max(retry_countdown(3, soon=False) for _ in range(200)) > 1.0


def test_a_space_still_waiting_for_its_resync_is_not_queued_again(spaces):
    celery_queue.take_all(RESYNC)
    resync_all()
    resync_all()
    assert sorted(resync_tasks(spaces)) == ["behind", "quieter"]


def test_a_resync_of_an_up_to_date_space_leaves_it_alone_but_a_wake_up_repairs_it(
        redis_server, tenant):
    space = new_space(tenant)
    queue(space, "orders")
    runner.run(space.uid, "storage")
    rabbit.delete_queue(space.vhost, "orders")
    reconcile_space(str(space.uid), resync=True, only_behind=True)
    assert "orders" not in rabbit.queue_names(space.vhost)  # nothing behind: not even looked at
    # A wake-up (a tenant throttled, an operator's "resync now") may change no sequence.
    reconcile_space(str(space.uid))
    assert "orders" in rabbit.queue_names(space.vhost)
    services.delete_address_space(ctx=CTX, space=space)
    runner.run(space.uid, "storage")


def test_a_resync_of_a_space_behind_applies_its_change(redis_server, tenant):
    space = new_space(tenant)
    runner.run(space.uid, "storage")
    queue(space, "orders")
    reconcile_space(str(space.uid), resync=True, only_behind=True)
    assert "orders" in rabbit.queue_names(space.vhost)
    services.delete_address_space(ctx=CTX, space=space)
    runner.run(space.uid, "storage")
