"""The usage page: a month of daily figures, the hours of a day and the quotas as SVG charts
drawn on the server; outsiders get 404, a bad day 400. Also the sign-in page (no sign-out
button for a visitor) and plans described in a tenant's words."""
import re

import pytest

from config_service.portal.forms import SpaceForm
from tests.portal.usage_data import daily_messages, write_month


def bar_values(html: str, chart: str) -> list[int]:
    svg = re.search(rf'<svg[^>]*data-chart="{chart}".*?</svg>', html, re.S).group(0)
    return [int(v) for v in re.findall(r'data-value="(\d+)"', svg)]


@pytest.fixture
def month(tenant):
    return write_month(tenant)


def test_the_usage_page_charts_thirty_days_the_hours_of_a_day_and_the_quotas(
        client, tenant, viewer, month):
    client.force_login(viewer)
    page = client.get(f"/portal/t/{tenant.slug}/usage/")
    assert page.status_code == 200
    html = page.content.decode()
    expected = [daily_messages(i) for i in range(30) if i != 12]  # day 12 was not measured
    assert bar_values(html, "messages-per-day") == expected
    assert bar_values(html, "bytes-per-day") == [m * 512 for m in expected]
    assert len(bar_values(html, "messages-per-hour")) == 24
    assert len(bar_values(html, "connections-per-hour")) == 24
    assert bar_values(html, "quota-usage") == [daily_messages(29), 16]  # bytes: no limit
    assert f"Messages per hour on {month.isoformat()} (UTC)" in html
    assert "16 of 12 (133%)" in html
    assert "<script" not in html.split("</head>")[1]  # no JavaScript charting


def test_another_day_shows_its_hours_and_a_bad_day_is_refused(client, tenant, owner, month):
    client.force_login(owner)
    earlier = client.get(f"/portal/t/{tenant.slug}/usage/?day=2020-01-01").content.decode()
    assert bar_values(earlier, "messages-per-hour") == []
    assert "Messages per hour on 2020-01-01" in earlier
    bad = client.get(f"/portal/t/{tenant.slug}/usage/?day=yesterday")
    assert bad.status_code == 400 and b"day:" in bad.content


def test_an_outsider_gets_404_on_the_usage_page(client, tenant, outsider, month):
    client.force_login(outsider)
    assert client.get(f"/portal/t/{tenant.slug}/usage/").status_code == 404


def test_a_tenant_without_usage_sees_empty_charts_that_say_so(client, tenant, owner):
    client.force_login(owner)
    html = client.get(f"/portal/t/{tenant.slug}/usage/").content.decode()
    assert bar_values(html, "messages-per-day") == []
    assert "Nothing measured yet" in html and "No hour measured yet" in html


def test_the_sign_in_page_shows_no_sign_out_button(client, db):
    page = client.get("/accounts/login/")
    assert page.status_code == 200
    assert b"Sign in" in page.content and b"Sign out" not in page.content


def test_a_signed_in_page_still_has_its_sign_out_button(client, tenant, owner):
    client.force_login(owner)
    assert b"Sign out" in client.get(f"/portal/t/{tenant.slug}/usage/").content


def test_plans_are_described_by_what_fits_in_them(tenant):
    choices = dict(SpaceForm().fields["plan"].choices)
    assert not any("{" in text for text in choices.values())
    assert choices["standard-small"] == (
        "Standard small: 1 router and 1 broker; holds 100 small queues, 10 medium queues, "
        "1 large queue or 1,000 small anycasts [standard]")
    assert choices["standard-medium"].startswith("Standard medium: 3 routers and 3 brokers; "
                                                 "holds 300 small queues")
    assert choices["standard-unlimited"] == (
        "Standard unlimited: as many routers and brokers as needed; addresses up to your "
        "tenant's quota [standard]")
    assert choices["brokered-single-broker"] == (
        "Brokered single broker: 1 broker; queues and topics up to your tenant's quota "
        "[brokered]")

