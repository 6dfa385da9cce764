"""The portal in a real browser (headless Chromium driven by Playwright), against the real
platform: a Celery worker running the agents, the embedded router and RabbitMQ.

A new tenant signs in, creates a standard address space and a queue, creates a messaging user,
sends and receives with a real AMQP client, watches the stats move and opens the usage page;
a viewer finds no control to change anything. An owner watches two clients on the Connections
page, opens one's links and closes the other, which its client sees. Set MAAS_SCREENSHOTS=DIR to
save screenshots.
"""
import os
import re
import time
import uuid

import pytest
from django.conf import settings
from playwright.sync_api import expect, sync_playwright
from proton import ConnectionException, Message
from proton.utils import BlockingConnection

from tenants.models import Role
from tenants.services import add_member, create_tenant
from tests.conftest import BROKER_STATS_LAG, CTX, Worker, make_user
from tests.workers.conftest import router, router_kind, router_settings, sync  # noqa: F401
from tests.workers.connected import connect, exchange, standard_space

pytestmark = pytest.mark.slow

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@pytest.fixture
def browser():
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # Playwright's sync API runs a loop
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def worker(transactional_db, redis_server, router):  # noqa: F811
    w = Worker(settings.DATABASES["default"]["NAME"],
               MAAS_ROUTER_MANAGEMENT_URL=settings.MAAS_ROUTER_MANAGEMENT_URL,
               MAAS_ROUTER_ADMIN_PASSWORD=settings.MAAS_ROUTER_ADMIN_PASSWORD,
               MAAS_ROUTER_AMQP_PORT=str(router.amqp_port))
    w.start()
    yield w
    w.stop()


def shot(page, name):
    target = os.environ.get("MAAS_SCREENSHOTS")
    if target:
        page.screenshot(path=os.path.join(target, f"{name}.png"), full_page=True)


def sign_in(page, base, username, password):
    page.goto(f"{base}/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()


def test_a_new_tenant_journey_and_a_viewer_who_cannot_change_anything(
        live_server, browser, worker, router):  # noqa: F811
    from tests.conftest import default_plans_installed

    default_plans_installed()
    slug = f"journey-{uuid.uuid4().hex[:5]}"
    nina = make_user("nina")
    nina.set_password("nina-password")
    nina.save()
    tenant = create_tenant(ctx=CTX, slug=slug, owner=nina)
    vic = make_user("vic")
    vic.set_password("vic-password")
    vic.save()
    add_member(ctx=CTX, tenant=tenant, user=vic, role=Role.VIEWER)
    base = live_server.url
    page = browser.new_page()

    sign_in(page, base, "nina", "nina-password")
    expect(page.get_by_test_id("role")).to_have_text("owner")
    page.get_by_label("Name").fill("web")
    page.get_by_label("Type").select_option("standard")
    page.get_by_label("Plan").select_option("standard-small")
    page.get_by_role("button", name="Create").click()
    expect(page.locator("h1")).to_contain_text("web")

    page.locator("#id_address").fill("orders")
    page.locator("#id_type").select_option("queue")
    page.locator("#id_plan").select_option("standard-small-queue")
    page.get_by_role("button", name="Create address").click()
    expect(page.get_by_test_id("address")).to_have_text("orders")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the worker applies it through the agents
        if page.locator("td.phase-Active").count():
            break
        page.wait_for_timeout(500)
        page.reload()
    expect(page.locator("td.phase-Active")).to_have_count(1)
    shot(page, "space")

    page.get_by_role("link", name="Messaging users").click()
    page.get_by_label("Username").fill("app")
    page.get_by_label("May send to (patterns, comma separated)").fill("orders")
    page.get_by_label("May receive from (patterns, comma separated)").fill("orders")
    page.get_by_role("button", name="Create user").click()
    password = page.get_by_test_id("new-password").inner_text().strip()
    shot(page, "users")

    vhost = f"{slug}.web"
    for _ in range(40):  # the user reaches the router through the worker
        try:
            conn = BlockingConnection(f"amqp://127.0.0.1:{router.amqp_port}",
                                      user=f"app@{vhost}", password=password,
                                      allowed_mechs="PLAIN", allow_insecure_mechs=True,
                                      timeout=5)
            break
        except Exception:
            page.wait_for_timeout(250)
    sender = conn.create_sender("orders")
    for i in range(3):
        sender.send(Message(body=f"m{i}"))

    page.goto(f"{base}/portal/t/{slug}/spaces/web/")
    # RabbitMQ's queue statistics lag up to BROKER_STATS_LAG; the table refreshes every 5 s.
    assert page.evaluate("typeof htmx") == "object"
    stats_ms = (BROKER_STATS_LAG + 15) * 1000
    expect(page.get_by_test_id("stored-orders")).to_have_text("3", timeout=stats_ms)
    receiver = conn.create_receiver("orders", credit=1)
    assert receiver.receive(timeout=10).body == "m0"
    receiver.accept()
    conn.close()
    expect(page.get_by_test_id("stored-orders")).to_have_text("2", timeout=stats_ms)

    page.get_by_role("link", name="Connect", exact=True).click()
    expect(page.get_by_test_id("connection-url")).to_contain_text("app%40")
    shot(page, "connect")
    page.get_by_role("link", name="Usage").click()
    expect(page.locator("h1")).to_contain_text("Usage and quotas")
    shot(page, "usage")
    page.get_by_role("link", name="History").click()
    expect(page.locator("body")).to_contain_text("messaging_user.created")
    shot(page, "history")
    page.get_by_role("button", name="Sign out").click()

    sign_in(page, base, "vic", "vic-password")
    page.goto(f"{base}/portal/t/{slug}/spaces/web/")
    expect(page.get_by_test_id("role")).to_have_text("viewer")
    expect(page.get_by_test_id("address")).to_have_text("orders")
    assert page.get_by_role("button", name=re.compile("Create|Change plan|Purge")).count() == 0
    assert page.get_by_role("link", name=re.compile("Delete|Purge")).count() == 0


def test_an_owner_sees_the_clients_connected_and_closes_one(
        live_server, browser, router, transactional_db):  # noqa: F811
    from tests.conftest import default_plans_installed

    default_plans_installed()
    slug = f"conns-{uuid.uuid4().hex[:5]}"
    olga = make_user("olga")
    olga.set_password("olga-password")
    olga.save()
    tenant = create_tenant(ctx=CTX, slug=slug, owner=olga)
    space = standard_space(tenant, "web", plan="standard-small")
    billing = connect(router, space, "billing-worker")
    checkout = connect(router, space, "checkout-service")
    exchange(checkout, billing, 3)

    base = live_server.url
    page = browser.new_page()
    try:
        sign_in(page, base, "olga", "olga-password")
        page.goto(f"{base}/portal/t/{slug}/spaces/web/")
        page.get_by_role("link", name="Connections").click()
        expect(page.locator("h1")).to_contain_text("Connections of web")
        rows = page.locator("tr[data-testid=connection]")
        expect(rows).to_have_count(2)
        checkout_row = rows.filter(has_text="checkout-service")
        expect(checkout_row).to_contain_text("app")
        expect(checkout_row.locator("td").nth(7)).to_have_text("3")  # messages in

        rows.filter(has_text="billing-worker").get_by_test_id("container-id").click()
        links = page.locator("tr[data-testid=link]")
        expect(links).to_have_count(1)
        expect(links).to_contain_text("receiver")
        expect(links).to_contain_text("orders")
        shot(page, "connections")

        checkout_row.get_by_role("link", name="Close").click()
        expect(page.locator("#confirm-title")).to_have_text(
            "Close the connection of checkout-service?")
        page.get_by_role("button", name="Yes, do it").click()
        expect(page.get_by_role("status")).to_contain_text("Connection of checkout-service")
        with pytest.raises(ConnectionException, match="forced"):
            checkout.wait(lambda: False, timeout=10)
        checkout.close()  # answers the router's close
        late = connect(router, space, "late-joiner")
        # the refresh (every 5 s, without a reload) drops the closed one and shows the new one
        expect(rows.filter(has_text="late-joiner")).to_have_count(1, timeout=15_000)
        expect(rows.filter(has_text="checkout-service")).to_have_count(0)
        expect(rows.filter(has_text="billing-worker")).to_have_count(1)
        late.close()
    finally:
        billing.close()
        try:
            checkout.close()
        except Exception:  # closed from the page
            pass
