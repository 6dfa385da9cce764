"""Browser sign-in: headless Chromium (Debian's) signs in on the provider's login page and lands
in MaaS signed in, with its tenant and role; signing out ends the provider's session too."""
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections
from playwright.sync_api import sync_playwright

from tenants import default_plans
from tenants.models import AddressPlan, AddressSpacePlan, Membership
from tenants.services import create_tenant
from tests.conftest import CTX, make_user

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def query(fn):
    """Runs ORM calls in a plain thread: Playwright's sync API keeps an event loop in this one,
    where Django would refuse them (or open a connection it never closes)."""
    def run():
        try:
            return fn()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


@pytest.fixture
def browser():
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def acme(transactional_db):
    default_plans.install(AddressPlan, AddressSpacePlan)
    return create_tenant(ctx=CTX, slug="acme", owner=make_user("founder"))


def sign_in(page, app_url: str, username: str, password: str,
            start: str = "/accounts/login/?next=/accounts/me/",
            lands: str = "/accounts/me/") -> None:
    page.goto(f"{app_url}{start}")
    page.wait_for_selector("#kc-form-login")
    page.fill("#username", username)
    page.fill("#password", password)
    page.click("#kc-login")
    page.wait_for_url(f"{app_url}{lands}")


def assert_signed_out_at_the_provider(page, app_url: str, issuer: str, then: str) -> None:
    """After a sign-out, `then` asks for the password again: the provider's session ended."""
    page.wait_for_url(f"{app_url}/accounts/signed-out/")
    page.goto(f"{app_url}{then}")
    page.wait_for_selector("#kc-form-login")
    assert page.url.startswith(issuer)


def test_a_user_signs_in_at_the_provider_and_lands_signed_in_with_tenant_and_role(
        oidc, app_server, acme, browser):
    page = browser.new_page()

    sign_in(page, app_server.url, "alice", "alice-pw")

    assert page.text_content("#username") == "alice"
    assert page.text_content("tr[data-tenant=acme] .role") == "admin"
    assert query(lambda: Membership.objects.get(tenant=acme, user__username="alice").role) == "admin"


def test_signing_out_ends_the_session_at_the_provider_too(oidc, app_server, acme, browser):
    page = browser.new_page()
    sign_in(page, app_server.url, "olga", "olga-pw")
    assert page.text_content("tr[data-tenant=acme] .role") == "owner"

    page.click("#sign-out")

    assert_signed_out_at_the_provider(page, app_server.url, oidc.issuer, then="/accounts/me/")


def test_a_wrong_password_stays_on_the_provider_login_page(oidc, app_server, acme, browser):
    page = browser.new_page()
    page.goto(f"{app_server.url}/accounts/login/")
    page.fill("#username", "alice")
    page.fill("#password", "wrong")
    page.click("#kc-login")

    assert "Invalid username or password" in page.text_content("#input-error")
    assert not query(Membership.objects.filter(user__username="alice").exists)


def test_an_invitation_mailed_from_the_portal_lets_the_invitee_in(oidc, app_server, acme, browser,
                                                                  mailer):
    """olga (owner, from a realm role) invites nina's address in the portal; the mail reaches
    the SMTP server; nina opens its link, signs in at the provider and lands in the tenant."""
    owner = browser.new_page()
    sign_in(owner, app_server.url, "olga", "olga-pw")
    owner.goto(f"{app_server.url}/portal/t/acme/members/")
    owner.fill("#id_email", "nina@example.test")
    owner.select_option("#id_role", "admin")
    owner.click("text=Send invitation")
    owner.wait_for_selector("[data-testid=invitation-link]")
    [message] = mailer.messages
    link = next(line for line in message.get_payload().splitlines() if "/invitations/" in line)
    assert link in owner.text_content("[data-testid=invitation-link]")

    invitee = browser.new_context().new_page()
    invitee.goto(link.replace("https://maas.example.com", app_server.url))
    invitee.wait_for_selector("#kc-form-login")
    invitee.fill("#username", "nina")
    invitee.fill("#password", "nina-pw")
    invitee.click("#kc-login")
    invitee.wait_for_url(f"{app_server.url}/portal/t/acme/")
    assert invitee.text_content("[data-testid=role]") == "admin"
    assert query(lambda: Membership.objects.get(tenant=acme, user__username="nina").role) == "admin"


def test_an_operator_signs_in_to_the_admin_site_at_the_provider_and_out_again(
        oidc, app_server, acme, browser):
    """root is an operator by a realm role: /admin/ sends the browser to the provider's login
    page and back into the admin; the admin's own sign-out ends the provider's session too."""
    page = browser.new_page()
    sign_in(page, app_server.url, "root", "root-pw", start="/admin/", lands="/admin/")

    assert "Site administration" in page.text_content("#content h1")
    assert page.text_content("#user-tools strong") == "root"

    page.click("#logout-form button")

    assert_signed_out_at_the_provider(page, app_server.url, oidc.issuer, then="/admin/")


def test_a_member_who_is_no_operator_is_told_so_at_the_admin_site(oidc, app_server, acme,
                                                                  browser):
    page = browser.new_page()
    sign_in(page, app_server.url, "alice", "alice-pw")

    response = page.goto(f"{app_server.url}/admin/")

    assert response.status == 403
    assert page.text_content("#not-an-operator") == "Operators only"
