"""The usage page in a real browser (headless Chromium): a month of usage drawn as charts that
take up room on the page, and no JavaScript or network fetch needed to draw them. With
MAAS_SCREENSHOTS=docs/screenshots it saves usage-charts.png (docs/portal.md shows it)."""
import pytest
from playwright.sync_api import expect

from tenants.services import create_tenant
from tests.conftest import CTX, default_plans_installed, make_user
from tests.portal.test_browser import browser, shot, sign_in  # noqa: F401 - fixture
from tests.portal.usage_data import write_month

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_the_usage_page_draws_its_charts_in_a_browser(live_server, browser):  # noqa: F811
    default_plans_installed()
    rita = make_user("rita")
    rita.set_password("rita-password")
    rita.save()
    tenant = create_tenant(ctx=CTX, slug="acme", owner=rita)
    write_month(tenant)
    context = browser.new_context(java_script_enabled=False, viewport={"width": 1100,
                                                                       "height": 900})
    page = context.new_page()
    requests = []
    page.on("request", lambda r: requests.append(r.url))
    sign_in(page, live_server.url, "rita", "rita-password")
    page.goto(f"{live_server.url}/portal/t/acme/usage/")
    for chart in ("messages-per-day", "bytes-per-day", "messages-per-hour",
                  "connections-per-hour", "quota-usage"):
        svg = page.locator(f'svg[data-chart="{chart}"]')
        expect(svg).to_be_visible()
        box = svg.bounding_box()
        assert box["width"] > 700 and box["height"] > 100, chart
    tallest = max(page.locator('svg[data-chart="messages-per-day"] rect[data-value]')
                  .evaluate_all("rects => rects.map(r => r.getBoundingClientRect().height)"))
    assert tallest > 100  # the busiest day fills most of the plot
    assert all(url.startswith(live_server.url) for url in requests)  # nothing from a CDN
    shot(page, "usage-charts")
    context.close()
