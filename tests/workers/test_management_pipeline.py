"""Management requests sent without waiting for each reply (`Management.many`): every answer
comes back to its own request, in order, refusals included, beyond the window of requests in
flight; a router gone meanwhile is RouterUnreachable. Real embedded router and qdrouterd."""
import pytest

from workers.agents.router import desired as rc
from workers.clients.qdr import Management, ManagementError, RouterUnreachable

BOTH_ROUTERS = True  # tests/workers/conftest.py


def test_many_requests_are_answered_each_in_order_with_refusals_in_place(mgmt):
    count = Management.WINDOW * 2 + 7  # more than one window in flight
    names = [f"maas:pipeline:address:a{i}" for i in range(count)]
    creates = [("CREATE", {"prefix": f"pipeline/a{i}", "distribution": "balanced"},
                {"type": rc.ADDRESS, "name": name}) for i, name in enumerate(names)]
    # The same name twice: the router refuses the second, and only that one.
    creates.insert(5, ("CREATE", {"prefix": "pipeline/other", "distribution": "balanced"},
                       {"type": rc.ADDRESS, "name": names[2]}))
    try:
        answers = mgmt.many(creates)
        assert len(answers) == count + 1
        assert isinstance(answers[5], ManagementError) and answers[5].status == 400
        created = answers[:5] + answers[6:]
        assert [a["name"] for a in created] == names
        assert [a["prefix"] for a in created] == [f"pipeline/a{i}" for i in range(count)]
        rows = mgmt.query(rc.ADDRESS, ["name", "prefix"], name_prefix="maas:pipeline:")
        assert {r["name"]: r["prefix"] for r in rows} == {
            name: f"pipeline/a{i}" for i, name in enumerate(names)}
        assert mgmt.many([]) == []
        # Queries sent at once read what each alone reads, over their later pages too.
        addresses, links = mgmt.query_many([(rc.ADDRESS, ["name", "prefix"]),
                                            (rc.LINK_ROUTE, ["name"])], page=7)
        assert addresses == mgmt.query(rc.ADDRESS, ["name", "prefix"], page=7)
        assert len([r for r in addresses if r["name"] in set(names)]) == count
        assert links == mgmt.query(rc.LINK_ROUTE, ["name"])
        # A request answered alone still finds its own reply after a window of others.
        assert mgmt.read(rc.ADDRESS, names[-1])["prefix"] == f"pipeline/a{count - 1}"
    finally:
        gone = mgmt.many([("DELETE", None, {"type": rc.ADDRESS, "name": n}) for n in names])
    assert not any(isinstance(answer, ManagementError) for answer in gone)
    assert mgmt.query(rc.ADDRESS, ["name"], name_prefix="maas:pipeline:") == []


def test_a_router_that_goes_away_mid_pipeline_is_unreachable(router, mgmt):
    calls = [("QUERY", {"attributeNames": ["name"]}, {"entityType": rc.ADDRESS})] * 50
    router.stop()
    try:
        with pytest.raises(RouterUnreachable):
            mgmt.many(calls)
    finally:
        router.start()
