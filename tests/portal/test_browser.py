"""The portal in a real browser (headless Chromium driven by Playwright), against the real
platform: a Celery worker running the agents, the embedded router and RabbitMQ.

A new tenant signs in, creates a standard address space and a queue, creates a messaging user,
sends and receives with a real AMQP client, watches the stats move and opens the usage page;
a viewer finds no control to change anything. Set MAAS_SCREENSHOTS=DIR to save screenshots.
"""
import os
import re
import time
import uuid

import pytest
from django.conf import settings
from playwright.sync_api import expect, sync_playwright
from proton import Message
from proton.utils import BlockingConnection

from tenants.models import Role
from tenants.services import add_member, create_tenant
from tests.conftest import BROKER_STATS_LAG, CTX, Worker, make_user
from tests.workers.conftest import router, router_kind, router_settings  # noqa: F401 - fixtures

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

    page.get_by_role("link", name="Connect").click()
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
