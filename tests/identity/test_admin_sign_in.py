"""The admin site signs operators in the way the portal does: through the provider when one is
configured (no password form beside the realm), with Django's form otherwise."""
from urllib.parse import parse_qs, urlsplit

from django.test import Client

from tests.conftest import make_user


def test_without_a_provider_the_admin_shows_its_password_form(db):
    make_user("ops", staff=True)

    page = Client().get("/admin/login/?next=/admin/")

    assert page.status_code == 200
    assert b'name="password"' in page.content
    signed_in = Client().post("/admin/login/?next=/admin/",
                              {"username": "ops", "password": "pw-unused-123"})
    assert signed_in.status_code == 302 and signed_in["Location"] == "/admin/"


def test_with_a_provider_the_admin_sends_the_browser_to_it_and_back_to_the_admin(oidc, db):
    to_login = Client().get("/admin/")
    assert to_login.status_code == 302
    assert urlsplit(to_login["Location"]).path == "/admin/login/"

    to_init = Client().get(to_login["Location"])
    assert to_init.status_code == 302
    assert urlsplit(to_init["Location"]).path == "/oidc/authenticate/"
    assert parse_qs(urlsplit(to_init["Location"]).query)["next"] == ["/admin/"]

    to_provider = Client().get(to_init["Location"])
    assert to_provider["Location"].startswith(f"{oidc.issuer}/")


def test_with_a_provider_the_admin_password_form_lets_nobody_in(oidc, db):
    make_user("ops", staff=True)

    attempt = Client().post("/admin/login/", {"username": "ops", "password": "pw-unused-123"})

    assert attempt.status_code == 302
    assert urlsplit(attempt["Location"]).path == "/oidc/authenticate/"
    assert "_auth_user_id" not in attempt.client.session


def test_a_signed_in_member_who_is_no_operator_gets_403_not_a_loop(oidc, db):
    client = Client()
    client.force_login(make_user("alice"))

    page = client.get("/admin/login/?next=/admin/")

    assert page.status_code == 403
    assert b"not an operator" in page.content
