"""An address create sends the stream's lock and its reads after it together
(config_service/statements.py `read_ahead`, core/rows.py `fetch_together`): in one round
trip, each read still a statement of its own that sees what the lock's previous holder
committed, and a read taken only by a call with the arguments it was made with."""
import tempfile
import threading

import pytest
from django.db import ProgrammingError, connection, transaction

from config_service import services
from config_service.models import Address, AddressSpace
from core.errors import Conflict, Invalid, NotFound
from core.rows import fetch_together
from tenants.models import AddressPlan, AddressSpacePlan
from tests.conftest import CTX


def add(space, address, plan="standard-small-anycast", type_="anycast"):
    return services.create_address(ctx=CTX, space=space, address=address, type=type_,
                                   plan=plan)


def protocol(fn) -> list[tuple[str, str]]:
    """(F or B, message) of every protocol message fn's statements exchanged (libpq's trace
    of this connection): F the client's, B the server's."""
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    with tempfile.TemporaryFile("w+") as trace:
        pgconn.trace(trace.fileno())
        try:
            fn()
        finally:
            pgconn.untrace()
        trace.seek(0)
        lines = [line.rstrip("\n").split("\t") for line in trace]
    return [(p[1], p[3].split()[0]) for p in lines if len(p) > 3]


def longest_burst(messages) -> int:
    """The most statements the client sent without waiting for an answer between (Execute:
    extended protocol, server-side binding and the pipeline; Query: client-side binding)."""
    best = run = 0
    for side, message in messages:
        if side == "B":
            run = 0
        elif message in ("Execute", "Query"):
            run += 1
            best = max(best, run)
    return best


@pytest.fixture
def space(tenant):
    return services.create_address_space(ctx=CTX, tenant=tenant, name="ahead",
                                         type="standard", plan="standard-medium")


def test_the_lock_and_the_reads_after_it_go_in_one_round_trip(space):
    for i in range(6):  # past the prepare threshold: the steady state's messages
        add(space, f"warm{i}")
    messages = protocol(lambda: add(space, "traced"))
    # the lock, the space, the plan, the name clash, the quota's bound and the usage
    assert longest_burst(messages) == 6
    # each of the other statements waits for its answer, as before
    invalid = protocol(lambda: pytest.raises(Invalid, add, space, "bad address!"))
    assert longest_burst(invalid) == 1
    assert Address.objects.filter(space=space, address="traced").exists()


@pytest.mark.django_db(transaction=True)
def test_a_create_waiting_for_the_lock_reads_what_its_holder_committed(space):
    add(space, "first")
    held, release, outcome = threading.Event(), threading.Event(), {}

    def holder():
        try:
            with transaction.atomic():
                add(space, "twin")
                held.set()
                release.wait(10)
        finally:
            connection.close()

    def waiter():
        try:
            add(AddressSpace.objects.get(pk=space.pk), "twin")
            outcome["error"] = None
        except Conflict as exc:
            outcome["error"] = exc
        finally:
            connection.close()

    first = threading.Thread(target=holder)
    first.start()
    assert held.wait(10)
    second = threading.Thread(target=waiter)
    second.start()
    second.join(1.0)
    assert second.is_alive() and not outcome  # waits for the stream's lock
    release.set()
    first.join(10)
    second.join(10)
    # its name clash read ran after the lock was granted: it saw the holder's address
    assert isinstance(outcome["error"], Conflict) and outcome["error"].field == "spec.address"
    assert Address.objects.filter(space=space, address="twin").count() == 1


def test_a_read_is_taken_only_for_the_arguments_it_was_made_with(space, tenant):
    stale = AddressSpace.objects.get(pk=space.pk)  # says standard-medium
    small = AddressSpacePlan.objects.get(name="standard-small")
    small.address_plans.remove(AddressPlan.objects.get(name="standard-large-anycast"))
    AddressSpace.objects.filter(pk=space.pk).update(plan="standard-small")
    # read ahead for standard-medium, which offers it; the space's plan now does not
    with pytest.raises(Invalid, match="not offered by address space plan standard-small"):
        add(stale, "big", plan="standard-large-anycast")
    assert not Address.objects.filter(space=space, address="big").exists()
    assert add(stale, "small").plan == "standard-small-anycast"


def test_a_space_gone_before_the_lock_is_not_found(space):
    stale = AddressSpace.objects.get(pk=space.pk)
    services.delete_address_space(ctx=CTX, space=stale)
    assert services.remove_address_space(uid=stale.uid)
    with pytest.raises(NotFound):
        add(stale, "late")


def test_statements_together_answer_in_order_and_fail_as_djangos(db):
    with transaction.atomic():
        assert fetch_together([("SELECT %s::int", [1]), ("SELECT %s::text, 2", ["a"]),
                               ("SELECT 1 WHERE false", [])]) == [[(1,)], [("a", 2)], []]
    with pytest.raises(ProgrammingError), transaction.atomic():
        fetch_together([("SELECT 1", []), ("SELECT * FROM no_such_table", [])])
    with transaction.atomic():  # the failed transaction was rolled back: the connection works
        assert fetch_together([("SELECT 3", [])]) == [[(3,)]]
