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
