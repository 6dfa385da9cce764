"""The usage API and the idempotent storing of a day's results."""
import datetime

from tenants.models import AddressUsageDaily, QuotaEvaluation
from workers.usage.job import store

DAY = datetime.date(2026, 11, 20)


def tables(tenant, messages=10):
    return {
        "address_daily": [{"tenant": tenant.slug, "space": "s", "address": "q", "day": DAY,
                           "messages_in": messages, "messages_out": messages - 1,
                           "bytes_in": 1000, "bytes_out": 900, "stored_messages": 1,
                           "stored_bytes": 100}],
        "tenant_daily": [{"tenant": tenant.slug, "day": DAY, "messages": 2 * messages - 1,
                          "bytes": 1900, "stored_bytes": 100, "connections": 2}],
        "quota": [{"tenant": tenant.slug, "day": DAY, "limit": "messages_per_day",
                   "used": 2 * messages - 1, "limit_value": 15, "share": (2 * messages - 1) / 15,
                   "breached": 2 * messages - 1 > 15, "forecast_day": DAY}],
    }


def url(tenant, query=""):
    return f"/api/v1/tenants/{tenant.slug}/usage/{query}"


def test_members_read_usage_and_quota_state_and_outsiders_get_404(tenant, clients):
    store(DAY, tables(tenant))
    body = clients["viewer"].get(url(tenant, "?from=2026-11-19&to=2026-11-21")).json()
    assert body["items"] == [{"space": "s", "address": "q", "day": "2026-11-20",
                              "messages_in": 10, "messages_out": 9, "bytes_in": 1000,
                              "bytes_out": 900, "stored_messages": 1, "stored_bytes": 100}]
    assert body["tenantDaily"][0]["messages"] == 19
    assert body["quota"]["limits"][0]["name"] == "messages_per_day"
    assert body["quota"]["limits"][0]["breached"] is True
    assert clients["outsider"].get(url(tenant)).status_code == 404


def test_csv_export(tenant, clients):
    store(DAY, tables(tenant))
    response = clients["owner"].get(url(tenant, "?from=2026-11-20&to=2026-11-20&export=csv"))
    assert response["Content-Type"] == "text/csv"
    lines = response.content.decode().splitlines()
    assert lines[0] == ("space,address,day,messages_in,messages_out,bytes_in,bytes_out,"
                        "stored_messages,stored_bytes")
    assert lines[1] == "s,q,2026-11-20,10,9,1000,900,1,100"


def test_bad_parameters_are_400_naming_the_field(tenant, clients):
    assert clients["owner"].get(url(tenant, "?from=yesterday")).json()["field"] == "from"
    assert clients["owner"].get(url(tenant, "?granularity=weekly")).json()["field"] == \
        "granularity"
    assert clients["owner"].get(url(tenant, "?from=2026-11-21&to=2026-11-20")).status_code == 400


def test_storing_a_day_again_replaces_it_instead_of_doubling(tenant):
    store(DAY, tables(tenant, messages=10))
    store(DAY, tables(tenant, messages=5))
    assert AddressUsageDaily.objects.filter(day=DAY).count() == 1
    assert AddressUsageDaily.objects.get(day=DAY).messages_in == 5
    assert QuotaEvaluation.objects.get(day=DAY).breached is False
