"""Which spaces the resync tick queues as behind: besides those with an unapplied change, those
an agent left an address error to retry (an autoLink not active yet, a queue not verified),
so the next tick retries them rather than their drift check minutes later; never those whose
errors are all permanent. And how many spaces it checks for drift (MAAS_DRIFT_CHECK_PERIOD), by
their last comparison of the whole space (`checked_at`), those behind included."""
import os
import subprocess
import sys
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from config_service import services
from config_service.models import AgentState
from tests.conftest import CTX
from workers.tasks import resync_candidates

pytestmark = pytest.mark.django_db


def brokered_space(tenant):
    made = services.create_address_space(ctx=CTX, tenant=tenant,
                                         name=f"r{uuid.uuid4().hex[:5]}", type="brokered",
                                         plan="brokered-single-broker")
    made.refresh_from_db()
    return made


@pytest.fixture
def space(tenant):
    return brokered_space(tenant)


def applied(space, errors: dict, at=None, checked_at=None) -> None:
    """The storage agent applied every change of the space (now, or `at`), leaving these
    address errors, and last compared the whole space with the broker then (or `checked_at`)."""
    at = at or timezone.now()
    AgentState.objects.update_or_create(space_uid=space.uid, kind="storage", defaults={
        "applied_sequence": space.last_sequence, "applied_at": at,
        "checked_at": checked_at or at, "address_errors": errors})


@pytest.mark.parametrize("errors, queued", [
    ({}, False),
    ({"orders": {"message": "Refused: bad argument", "permanent": True}}, False),
    ({"orders": {"message": "Not yet verified", "permanent": False}}, True),
    ({"orders": {"message": "Not yet verified"}}, True),  # not marked permanent: retried
    ({"a": {"message": "Refused", "permanent": True},
      "b": {"message": "Not yet verified", "permanent": False}}, True),
])
def test_a_space_with_an_address_error_to_retry_is_behind(space, errors, queued):
    applied(space, errors)
    assert (space.uid in resync_candidates(timezone.now())[0]) is queued


def test_a_space_whose_change_is_not_applied_is_behind_whatever_its_errors(space):
    AgentState.objects.create(space_uid=space.uid, kind="storage",
                              applied_sequence=space.last_sequence - 1,
                              applied_at=timezone.now(), address_errors={})
    assert space.uid in resync_candidates(timezone.now())[0]


def quiet_spaces(tenant, n: int, applied_at) -> set:
    """n brokered spaces whose storage agent applied everything at `applied_at`, no errors."""
    spaces = [brokered_space(tenant) for _ in range(n)]
    for made in spaces:
        applied(made, {}, at=applied_at)
    return {made.uid for made in spaces}


@pytest.mark.parametrize("period, share", [(300.0, 2), (600.0, 1)])
def test_a_tick_checks_the_drift_period_s_share_of_the_quiet_spaces(tenant, settings, period,
                                                                     share):
    """Ten spaces, three of them reconciled just now: a tick checks a fifth of all spaces with
    the 300 s default (2), a tenth with 600 s (1); the longest unchecked first, never one
    reconciled within the last interval."""
    settings.MAAS_DRIFT_CHECK_PERIOD = period
    now = timezone.now()
    old = quiet_spaces(tenant, 6, now - timedelta(hours=1))
    oldest = quiet_spaces(tenant, 1, now - timedelta(hours=2))
    recent = quiet_spaces(tenant, 3, now)
    behind, drifting = resync_candidates(now)
    assert not (old | oldest | recent) & set(behind)
    assert len(drifting) == share  # ceil(10 spaces / ticks of the period)
    assert drifting[0] in oldest and not set(drifting) & recent


def test_a_drift_period_shorter_than_the_resync_interval_is_refused_at_start():
    """A period under one tick would mean every space every tick: said plainly, not rounded."""
    env = dict(os.environ, MAAS_DRIFT_CHECK_PERIOD="30", DJANGO_SETTINGS_MODULE="maas.settings")
    done = subprocess.run([sys.executable, "-c", "import django; django.setup()"], env=env,
                          capture_output=True, text=True, timeout=60,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert done.returncode != 0
    assert "MAAS_DRIFT_CHECK_PERIOD must be at least MAAS_RESYNC_INTERVAL (60 s), not 30" \
        in done.stderr


@pytest.mark.parametrize("behind_by", ["an error to retry", "a change pending"])
def test_a_space_behind_is_still_due_its_drift_check(space, behind_by):
    """The error, or what a busy space's pending change waits on, may be one only the drift
    check mends (an agent that is not behind must act:
    tests/workers/test_credential_rotation.py): the space's turn for it comes all the same."""
    now = timezone.now()
    errors = {"orders": {"message": "Not yet verified", "permanent": False}} \
        if behind_by == "an error to retry" else {}
    applied(space, errors, at=now - timedelta(hours=1))
    if behind_by == "a change pending":
        services.create_address(ctx=CTX, space=space, address="orders", type="queue",
                                plan="brokered-queue")
    behind, drifting = resync_candidates(now)
    assert space.uid in drifting and space.uid in behind
    AgentState.objects.filter(space_uid=space.uid).update(checked_at=now)
    behind, drifting = resync_candidates(now)  # checked just now: behind, not checked again
    assert space.uid in behind and space.uid not in drifting


def test_the_drift_check_goes_by_the_last_whole_comparison_not_the_last_change(tenant,
                                                                               settings):
    """A busy space's changes take the short paths (its new addresses alone), which check
    nothing else of it: one whose changes are all recent but whose last full comparison is old
    is due first; one never compared whole (a state from before `checked_at`) before that."""
    settings.MAAS_DRIFT_CHECK_PERIOD = settings.MAAS_RESYNC_INTERVAL  # all due ones, in order
    now = timezone.now()
    busy, never, quiet = brokered_space(tenant), brokered_space(tenant), brokered_space(tenant)
    applied(busy, {}, at=now - timedelta(seconds=5), checked_at=now - timedelta(hours=2))
    applied(never, {}, at=now - timedelta(seconds=5))
    AgentState.objects.filter(space_uid=never.uid).update(checked_at=None)
    applied(quiet, {}, at=now - timedelta(hours=1))
    behind, drifting = resync_candidates(now)
    assert drifting[:3] == [never.uid, busy.uid, quiet.uid] and not behind
