"""The auth service's verifier keeps the logins it verified (maas/bindings.py, Logins), so that a
client's next login reads no user: and drops one as soon as the config log says its password,
its rules, its user, its space or its tenant changed. On the database, through the service
functions; the verifier's clock is the test's (a second between two reads of the log)."""
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from config_service import services
from maas.bindings import Logins
from tenants.services import delete_tenant
from tests.conftest import CTX, b64

from .conftest import new_space, new_user

pytestmark = pytest.mark.django_db(transaction=True)  # the verifier ends its transaction


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def logins():
    clock = Clock()
    verifier = Logins(clock=clock)
    verifier.clock_ = clock
    return verifier


def later(logins: Logins) -> None:
    logins.clock_.now += Logins.POLL_EVERY


def test_a_login_verified_once_reads_no_user_the_next_time(logins, tenant):
    space = new_space(tenant)
    new_user(space, "app", "app-password")
    name = f"app@{space.vhost}"
    assert logins(name, "app-password").sub == name
    with CaptureQueriesContext(connection) as queries:
        assert logins(name, "app-password").sub == name  # within the second: nothing read
    assert len(queries) == 0
    later(logins)
    with CaptureQueriesContext(connection) as queries:
        assert logins(name, "app-password").sub == name
    assert not any("messaginguser" in q["sql"] for q in queries.captured_queries)
    assert logins(name, "wrong") is None  # another password is checked, and refused


def test_a_changed_password_is_asked_for_at_once(logins, tenant):
    space = new_space(tenant)
    user = new_user(space, "app", "app-password")
    name = f"app@{space.vhost}"
    assert logins(name, "app-password") is not None
    later(logins)
    logins(name, "app-password")  # the log read up to here
    services.update_messaging_user(ctx=CTX, space=space, name=user.name,
                                   authentication={"type": "password",
                                                   "password": b64("new-password")})
    later(logins)
    assert logins(name, "app-password") is None
    assert logins(name, "new-password").sub == name


@pytest.mark.parametrize("gone", ["user", "space", "tenant"])
def test_a_deleted_user_space_or_tenant_logs_in_no_more(logins, tenant, gone):
    space = new_space(tenant)
    user = new_user(space, "app", "app-password")
    name = f"app@{space.vhost}"
    assert logins(name, "app-password") is not None
    later(logins)
    logins(name, "app-password")
    if gone == "user":
        services.delete_messaging_user(ctx=CTX, space=space, name=user.name)
    elif gone == "space":
        services.delete_address_space(ctx=CTX, space=space)
    else:
        delete_tenant(ctx=CTX, tenant=tenant)
    later(logins)
    assert logins(name, "app-password") is None


def test_a_bare_login_kept_is_dropped_when_a_namesake_comes_in_another_space(logins, tenant):
    first, second = new_space(tenant), new_space(tenant)
    new_user(first, "app", "same-password")
    assert logins("app", "same-password").sub == f"app@{first.vhost}"
    later(logins)
    logins("app", "same-password")
    new_user(second, "app", "same-password")  # the bare login names nobody now
    later(logins)
    assert logins("app", "same-password") is None


def test_the_memory_alone_answers_only_a_kept_login_while_the_log_was_read_lately(logins,
                                                                                   tenant):
    space = new_space(tenant)
    user = new_user(space, "app", "app-password")
    name = f"app@{space.vhost}"
    assert logins.cached(name, "app-password") is None  # never verified: ask the verifier
    assert logins(name, "app-password") is not None
    with CaptureQueriesContext(connection) as queries:
        assert logins.cached(name, "app-password").sub == name
        assert logins.cached(name, "wrong") is None
    assert len(queries) == 0
    logins.clock_.now += Logins.FRESH + 0.1
    assert logins.cached(name, "app-password") is None  # the log's last read is too old
    logins(name, "app-password")  # the verifier reads it again
    services.update_messaging_user(ctx=CTX, space=space, name=user.name,
                                   authentication={"type": "password",
                                                   "password": b64("new-password")})
    later(logins)
    logins(f"nobody@{space.vhost}", "x")  # any login reads the log: the change is seen
    assert logins.cached(name, "app-password") is None
