"""Two agents that both see a terminating space's last teardown done race to remove it: one
appends `address_space.removed`, the other finds nothing left to do (seen in CI, where the
loser raised NotFound from a test's teardown)."""
import threading
import time
import uuid

from django.db import connection, transaction

from config_service import services
from config_service.models import AddressSpace
from eventlog import log
from eventlog.models import ConfigEvent
from tests.conftest import CTX


def test_the_second_of_two_concurrent_removals_finds_the_space_gone(transactional_db, tenant):
    space = services.create_address_space(ctx=CTX, tenant=tenant, name=f"r{uuid.uuid4().hex[:5]}",
                                          type="brokered", plan="brokered-single-broker")
    services.delete_address_space(ctx=CTX, space=space)
    locked, outcome = threading.Event(), {}

    def first():  # holds the stream's lock while the second looks, then removes and commits
        try:
            with transaction.atomic():
                log.lock_stream(space.uid)
                locked.set()
                time.sleep(0.5)  # the second has read the (still terminating) space by now
                outcome["first"] = services.remove_address_space(uid=space.uid)
        finally:
            connection.close()

    def second():
        locked.wait(5)
        try:
            outcome["second"] = services.remove_address_space(uid=space.uid)
        except Exception as exc:  # noqa: BLE001 - the outcome under test
            outcome["second"] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert outcome == {"first": True, "second": False}
    assert not AddressSpace.objects.filter(uid=space.uid).exists()
    assert ConfigEvent.objects.filter(stream__uid=space.uid,
                                      type="address_space.removed").count() == 1
