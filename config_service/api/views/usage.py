"""The usage API: a tenant's metered usage and quota state, as JSON or CSV."""
import csv
import datetime
import io

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.schemas import READ
from core.errors import Invalid
from tenants.access import tenant_for
from tenants.models import (
    AddressUsageDaily,
    AddressUsageHourly,
    QuotaEvaluation,
    TenantQuota,
    TenantUsageDaily,
)
from tenants.roles import Action

from . import usage_schemas as schemas

COUNTERS = ("messages_in", "messages_out", "bytes_in", "bytes_out", "stored_messages",
            "stored_bytes")
MAX_DAYS = 92


def _day(value, field: str, default: datetime.date) -> datetime.date:
    if not value:
        return default
    try:
        return datetime.date.fromisoformat(value)
    except ValueError:
        raise Invalid("must be a date, YYYY-MM-DD", field) from None


class UsageView(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("from", str), OpenApiParameter("to", str),
                    OpenApiParameter("granularity", str, enum=["daily", "hourly"]),
                    OpenApiParameter("space", str),
                    OpenApiParameter("export", str, enum=["csv"], description="CSV download")],
        responses={(200, "application/json"): schemas.UsageReport,
                   (200, "text/csv"): OpenApiTypes.STR, **READ},
        summary="Metered usage per address space and address, and the tenant's quota state",
    )
    def get(self, request, tenant):
        t = tenant_for(request.user, tenant, Action.READ)
        params = request.query_params
        today = datetime.datetime.now(datetime.UTC).date()
        end = _day(params.get("to"), "to", today)
        start = _day(params.get("from"), "from", end - datetime.timedelta(days=6))
        if start > end:
            raise Invalid("from must not be after to", "from")
        if (end - start).days >= MAX_DAYS:
            raise Invalid(f"at most {MAX_DAYS} days at a time", "from")
        granularity = params.get("granularity", "daily")
        if granularity not in ("daily", "hourly"):
            raise Invalid("granularity must be daily or hourly", "granularity")
        if granularity == "daily":
            rows = AddressUsageDaily.objects.filter(tenant=t, day__range=(start, end))
            key = "day"
        else:
            rows = AddressUsageHourly.objects.filter(tenant=t, hour__date__range=(start, end))
            key = "hour"
        if params.get("space"):
            rows = rows.filter(space=params["space"])
        items = [
            {"space": r["space"], "address": r["address"], key: r[key].isoformat(),
             **{c: r[c] for c in COUNTERS}}
            for r in rows.order_by(key, "space", "address").values("space", "address", key,
                                                                    *COUNTERS)
        ]
        if params.get("export") == "csv":
            return self._csv(t.slug, key, items)
        quota = TenantQuota.objects.filter(tenant=t).first()
        latest = QuotaEvaluation.objects.filter(tenant=t).order_by("-day").values_list(
            "day", flat=True).first()
        return Response({
            "kind": "UsageReport", "tenant": t.slug, "granularity": granularity,
            "from": start.isoformat(), "to": end.isoformat(), "items": items,
            "tenantDaily": [
                {"day": d["day"].isoformat(), **{k: d[k] for k in (
                    "messages", "bytes", "stored_bytes", "connections")}}
                for d in TenantUsageDaily.objects.filter(tenant=t, day__range=(start, end))
                .order_by("day").values("day", "messages", "bytes", "stored_bytes",
                                        "connections")
            ],
            "quota": {
                "throttled": bool(quota and quota.throttled),
                "throttledLimits": quota.throttled_limits if quota else [],
                "overrideUntil": quota.override_until.isoformat()
                if quota and quota.override_until else None,
                "evaluatedDay": latest.isoformat() if latest else None,
                "limits": [
                    {"name": q.limit, "used": q.used, "limit": q.limit_value, "share": q.share,
                     "breached": q.breached,
                     "forecastDay": q.forecast_day.isoformat() if q.forecast_day else None}
                    for q in QuotaEvaluation.objects.filter(tenant=t, day=latest).order_by(
                        "limit")
                ] if latest else [],
            },
        })

    @staticmethod
    def _csv(slug: str, key: str, items: list[dict]) -> HttpResponse:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=["space", "address", key, *COUNTERS])
        writer.writeheader()
        writer.writerows(items)
        response = HttpResponse(out.getvalue(), content_type="text/csv")
        response["Content-Disposition"] = f'attachment; filename="usage-{slug}.csv"'
        return response
