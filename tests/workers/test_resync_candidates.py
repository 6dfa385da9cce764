"""Which spaces the resync tick queues as behind: besides those with an unapplied change, those
an agent left an address error to retry (an autoLink not active yet, a queue not verified),
so the next tick retries them rather than their drift check minutes later; never those whose
errors are all permanent."""
import uuid

import pytest
from django.utils import timezone

from config_service import services
from config_service.models import AgentState
from tests.conftest import CTX
from workers.tasks import resync_candidates

pytestmark = pytest.mark.django_db


@pytest.fixture
def space(tenant):
    made = services.create_address_space(ctx=CTX, tenant=tenant,
                                         name=f"r{uuid.uuid4().hex[:5]}", type="brokered",
                                         plan="brokered-single-broker")
    made.refresh_from_db()
    return made


def applied(space, errors: dict) -> None:
    """The storage agent applied every change of the space, leaving these address errors."""
    AgentState.objects.update_or_create(space_uid=space.uid, kind="storage", defaults={
        "applied_sequence": space.last_sequence, "applied_at": timezone.now(),
        "address_errors": errors})


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


def test_drift_checks_wait_while_a_backlog_of_changes_is_applied(tenant, monkeypatch):
    """A fill leaves hundreds of spaces behind: their changes go first, and the quiet spaces'
    drift checks (full diffs) wait; a few spaces behind, ordinary traffic, does not hold them."""
    monkeypatch.setattr("workers.tasks.DRIFT_WAITS_FOR_BACKLOG", 3)
    spaces = [services.create_address_space(ctx=CTX, tenant=tenant, name=f"d{i}",
                                            type="brokered", plan="brokered-single-broker")
              for i in range(6)]
    for made in spaces:
        made.refresh_from_db()
    an_hour_ago = timezone.now() - timezone.timedelta(hours=1)
    for i, made in enumerate(spaces[:3]):  # quiet, applied long ago: due a drift check
        AgentState.objects.create(space_uid=made.uid, kind="storage",
                                  applied_sequence=made.last_sequence,
                                  applied_at=an_hour_ago + timezone.timedelta(seconds=i))
    for made in spaces[3:5]:  # behind, with the sixth (never applied): three, not more than 3
        AgentState.objects.create(space_uid=made.uid, kind="storage",
                                  applied_sequence=made.last_sequence - 1, applied_at=an_hour_ago)
    behind, drifting = resync_candidates(timezone.now())
    assert set(behind) == {s.uid for s in spaces[3:]}
    assert drifting == [spaces[0].uid, spaces[1].uid]  # a share: ceil(6 / 5), oldest first
    AgentState.objects.filter(space_uid=spaces[2].uid).update(
        applied_sequence=spaces[2].last_sequence - 1)  # a fourth behind: more than 3
    behind, drifting = resync_candidates(timezone.now())
    assert len(behind) == 4 and drifting == []
