"""Logins against the real auth service with real proton clients: user@vhost, bare user names,
the identity its open carries (and no address-authz), refusals, and the router admin."""
import pytest
from proton import ConnectionException

from config_service import services
from tests.conftest import CTX, b64

from .conftest import identity_of, login, new_space, new_user


def refused(port: int, user: str, password: str) -> str:
    with pytest.raises(ConnectionException) as failure:
        login(port, user, password)
    assert "amqp:unauthorized-access" in str(failure.value)
    assert "Authentication failed" in str(failure.value)
    return str(failure.value)


def test_a_user_at_its_vhost_gets_its_identity_and_no_address_authz(auth_port, tenant):
    space = new_space(tenant)
    new_user(space, "app", "app-password", [
        {"addresses": ["orders"], "operations": ["send"]},
        {"addresses": ["news/*"], "operations": ["recv"]},
    ])
    conn = login(auth_port, f"app@{space.vhost}", "app-password")
    identity, authz = identity_of(conn)
    assert identity == {"sub": f"app@{space.vhost}", "preferred_username": "app"}
    # The space's vhost policy carries the rules: with address-authz qdrouterd 1.19 would let
    # anonymous senders through to its own management (docs/router.md).
    assert authz is None
    assert "ADDRESS-AUTHZ" not in (conn.conn.remote_offered_capabilities or ())
    assert conn.conn.remote_container == "maas-auth-service"
    conn.close()


def test_a_bare_user_name_logs_in_to_the_space_its_password_fits(auth_port, tenant):
    first, second = new_space(tenant), new_space(tenant)
    new_user(first, "app", "first-password")
    new_user(second, "app", "second-password")
    conn = login(auth_port, "app", "second-password")
    assert identity_of(conn)[0]["sub"] == f"app@{second.vhost}"
    conn.close()


def test_a_bare_login_whose_password_fits_two_spaces_is_refused_as_ambiguous(auth_port, tenant):
    first, second = new_space(tenant), new_space(tenant)
    new_user(first, "app", "same-password")
    new_user(second, "app", "same-password")
    refused(auth_port, "app", "same-password")
    conn = login(auth_port, f"app@{first.vhost}", "same-password")
    assert identity_of(conn)[0]["sub"] == f"app@{first.vhost}"
    conn.close()


def test_it_refuses_a_wrong_password(auth_port, tenant):
    space = new_space(tenant)
    new_user(space, "app", "app-password")
    refused(auth_port, f"app@{space.vhost}", "wrong-password")
    refused(auth_port, "app", "wrong-password")


def test_it_refuses_an_unknown_user_vhost_or_space(auth_port, tenant):
    space = new_space(tenant)
    new_user(space, "app", "app-password")
    refused(auth_port, f"nobody@{space.vhost}", "app-password")
    refused(auth_port, "nobody", "app-password")
    refused(auth_port, f"app@{tenant.slug}.elsewhere", "app-password")
    refused(auth_port, f"app@{space.name}", "app-password")  # a vhost is <tenant>.<space>


def test_it_refuses_the_users_of_a_terminating_space(auth_port, tenant):
    space = new_space(tenant)
    new_user(space, "app", "app-password")
    services.delete_address_space(ctx=CTX, space=space)  # no agent runs: it stays terminating
    refused(auth_port, f"app@{space.vhost}", "app-password")
    refused(auth_port, "app", "app-password")


def test_a_changed_password_applies_to_the_next_login(auth_port, tenant):
    space = new_space(tenant)
    user = new_user(space, "app", "old-password")
    services.update_messaging_user(ctx=CTX, space=space, name=user.name, authentication={
        "type": "password", "password": b64("new-password")})
    refused(auth_port, f"app@{space.vhost}", "old-password")
    login(auth_port, f"app@{space.vhost}", "new-password").close()


def test_the_router_admin_logs_in_with_its_own_password_only(auth_port, settings):
    settings.MAAS_ROUTER_ADMIN_USER, settings.MAAS_ROUTER_ADMIN_PASSWORD = "admin", "mgmt-secret"
    conn = login(auth_port, "admin", "mgmt-secret")
    assert identity_of(conn) == ({"sub": "admin", "preferred_username": "admin"}, None)
    conn.close()
    refused(auth_port, "admin", "mgmt-secret-not")
    refused(auth_port, "admin@x.y", "mgmt-secret")
