"""OpenAPI types of the usage report (`usage.py`): what a tenant used per day and address, and
where it stands against its quota (describing only, as core/api/schemas.py says)."""
from rest_framework import serializers as s

from core.api.schemas import Described, always
from tenants.api.schemas import ThrottledLimit


class UsageCounters(Described):
    """Definitions in docs/usage.md ("What is counted")."""

    messages_in = s.IntegerField(help_text=(
        "Messages clients sent to the address: deliveries the router received (standard "
        "spaces), messages published into the queue or to the topic's exchange (RabbitMQ); "
        "0 for a brokered subscription, whose arrivals are its topic's messages_out."))
    messages_out = s.IntegerField(help_text=(
        "Messages delivered: by the router to receivers within their credit (one per receiver "
        "of a multicast), taken for good from a brokered queue (no redeliveries), or routed "
        "by a topic's exchange into queues."))
    bytes_in = s.IntegerField(help_text=(
        "Standard spaces on the embedded router: encoded AMQP message bytes (sections, without "
        "frame headers); qdrouterd counts none. Brokered spaces, on the row whose address is "
        "empty: octets of the space's MQTT and AMQP 0-9-1 connections as RabbitMQ counts them, "
        "a floor (RabbitMQ 3.10 counts none for AMQP 1.0)."))
    bytes_out = s.IntegerField(help_text="As bytes_in, towards the clients.")
    stored_messages = s.IntegerField(help_text="Peak of the messages stored in the broker queue.")
    stored_bytes = s.IntegerField(help_text="Peak of their bytes as RabbitMQ counts them.")


class AddressUsage(UsageCounters):
    """One address over one day (granularity daily) or one hour (hourly). The address "" is
    the space as a whole: traffic measured per space only (a brokered space's octets)."""

    space = s.CharField()
    address = s.CharField()
    day = s.DateField(required=False, help_text="With granularity daily.")
    hour = s.DateTimeField(required=False, help_text="With granularity hourly.")


class TenantUsageDay(Described):
    day = s.DateField()
    messages = s.IntegerField(help_text="messages_in + messages_out over the tenant's addresses.")
    bytes = s.IntegerField(help_text="bytes_in + bytes_out, including the space rows (\"\").")
    stored_bytes = s.IntegerField(help_text=(
        "Peak: per hour the sum of the spaces' hourly peaks, the day's highest hour."))
    connections = s.IntegerField(help_text="Peak, summed over spaces as stored_bytes.")


class QuotaLimit(Described):
    name = s.CharField(help_text="messages_per_day, bytes_per_day, stored_bytes, ...")
    used = s.IntegerField()
    limit = s.IntegerField(allow_null=True)
    share = s.FloatField(allow_null=True, help_text="used / limit.")
    breached = s.BooleanField()
    forecastDay = s.DateField(allow_null=True, help_text="When the limit will be reached.")


class QuotaState(Described):
    throttled = s.BooleanField()
    throttledLimits = ThrottledLimit(many=True)
    overrideUntil = s.DateTimeField(allow_null=True)
    evaluatedDay = s.DateField(allow_null=True, help_text="The last evaluation, if any.")
    limits = QuotaLimit(many=True, help_text="As evaluated on evaluatedDay.")


class UsageReport(Described):
    kind = always("UsageReport")
    tenant = s.CharField()
    granularity = s.ChoiceField(choices=["daily", "hourly"])
    to = s.DateField()
    items = AddressUsage(many=True)
    tenantDaily = TenantUsageDay(many=True)
    quota = QuotaState()

    def get_fields(self):
        # `from` is a Python keyword: no class attribute can carry that name.
        fields = super().get_fields()
        return {"kind": fields.pop("kind"), "tenant": fields.pop("tenant"),
                "granularity": fields.pop("granularity"), "from": s.DateField(), **fields}


