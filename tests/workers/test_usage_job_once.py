"""One usage job at a time on the platform: Celery delivers a task again once it has run longer
than Redis' visibility timeout (5 min; the job took 9 min at 100k addresses), and that second
delivery started a second Spark job beside the first. Now it does nothing. Likewise one round
of usage samples at a time: a round longer than the interval took the background worker's
second process too."""
import datetime

import psycopg
import pytest
from django.db import connection

from tenants.models import UsageJobRun
from workers.usage import job, sampler

DAY = datetime.date(2026, 1, 1)


@pytest.fixture
def other_session(db):
    """A session of another process (a second worker), on the test database."""
    d = connection.settings_dict
    with psycopg.connect(host=d["HOST"], port=d["PORT"] or 5432, user=d["USER"],
                         dbname=d["NAME"], autocommit=True) as conn:
        yield conn


def taken(session) -> bool:
    got = session.execute("SELECT pg_try_advisory_lock(%s)", [job._ONE_JOB_LOCK]).fetchone()[0]
    if got:
        session.execute("SELECT pg_advisory_unlock(%s)", [job._ONE_JOB_LOCK])
    return not got


def test_a_run_while_another_is_under_way_does_nothing(other_session):
    other_session.execute("SELECT pg_advisory_lock(%s)", [job._ONE_JOB_LOCK])
    assert job.run_day(DAY) is None  # no Spark session: nothing is started
    assert not UsageJobRun.objects.exists()
    other_session.execute("SELECT pg_advisory_unlock(%s)", [job._ONE_JOB_LOCK])


def test_a_run_lets_go_of_the_platform_even_when_it_fails(other_session):
    with pytest.raises(AttributeError):
        job.run_day(DAY, spark=object())  # not a Spark session: the job fails inside
    assert UsageJobRun.objects.get().status == UsageJobRun.FAILED
    assert not taken(other_session)  # the next run, anywhere, may start


def test_a_sampling_round_while_another_runs_does_nothing(other_session):
    other_session.execute("SELECT pg_advisory_lock(%s)", [sampler._ONE_ROUND_LOCK])
    try:
        assert sampler.sample() == -1  # nothing read, nothing written
    finally:
        other_session.execute("SELECT pg_advisory_unlock(%s)", [sampler._ONE_ROUND_LOCK])
