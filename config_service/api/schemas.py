"""OpenAPI types of the API's bodies: serializers that only describe, never render.

The views render with `resources.py`; these say field by field what that returns (and what a
posted manifest may hold), so that /api/schema/ types every body and a client can be generated
from it. Enums are closed sets the code checks (phases, address and space types, operations,
roles); `kind`, `apiVersion` and event types are strings, so that a new value breaks no client.
"""
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers as s

from tenants.models import AddressSpaceType, AddressType, Role
from tenants.router_policy import ROUTER_POLICY_BOUNDS

from .. import validation
from ..events import EVENT_TYPES
from ..status import PHASES
from .resources import ADMIN_API, ENMASSE, MAAS_API, USER_API

ADDRESS_SPACE_TYPES = AddressSpaceType.values
ADDRESS_TYPES = AddressType.values
OPERATIONS = list(validation.OPERATIONS)
ROLES = Role.values
AUTHENTICATION_TYPES = ["password"]


class Described(s.Serializer):
    # The base of the serializers below, which describe a body and never validate nor render
    # one. No docstring: drf-spectacular would give it to every body as its description.
    pass


def always(value: str) -> s.CharField:
    """`kind` or `apiVersion` of an answer: one value, typed as a string (see above)."""
    return s.CharField(help_text=f"Always `{value}`.")


# Errors --------------------------------------------------------------------------------------

class Error(Described):
    """The one error shape of the API (config_service/api/errors.py)."""

    status = s.IntegerField(help_text="The HTTP status again.")
    code = s.CharField(help_text="Machine-readable: invalid, not_found, conflict, "
                                 "quota_exceeded, permission_denied, not_authenticated, ...")
    message = s.CharField()
    detail = s.CharField(help_text="The same as message (DRF's name for it).")
    field = s.CharField(required=False, help_text="The bad input, e.g. `spec.plan`.")


def errors(*codes: int) -> dict:
    """Responses entries for the error statuses an operation answers with."""
    return {code: Error for code in codes}


# A read: 400 for a bad query parameter (or a control character in the URL), 404 for what you
# cannot see. A change: 403 for your role or a quota, 409 for a conflict; 413 for a body over
# the size limit.
READ = errors(400, 401, 404)
CHANGE = errors(400, 401, 403, 404, 409)
WRITE = {**CHANGE, **errors(413)}


# Shared pieces -------------------------------------------------------------------------------

class ObjectMeta(Described):
    name = s.CharField()
    namespace = s.CharField(help_text="The tenant's name.")
    resourceVersion = s.CharField(help_text="Changes on every change; send it back on a write "
                                            "(or as If-Match) to be refused with 409 if stale.")
    creationTimestamp = s.DateTimeField()


class AddressSpaceMeta(ObjectMeta):
    uid = s.UUIDField()


class InSpaceMeta(ObjectMeta):
    """Metadata of an Address or a MessagingUser: its name is `<space>.<name>`."""

    addressSpace = s.CharField()


class ManifestMeta(Described):
    """Metadata of a posted manifest; other keys (labels, annotations, ...) are ignored."""

    name = s.CharField(required=False)
    resourceVersion = s.CharField(required=False, help_text="The version the change is based "
                                                            "on: a stale one is refused (409).")


class NamedManifestMeta(ManifestMeta):
    name = s.CharField()


class ListMeta(Described):
    totalItems = s.IntegerField()
    next = s.URLField(allow_null=True, help_text="The next page, or null.")
    previous = s.URLField(allow_null=True, help_text="The previous page, or null.")


def list_of(item: type[s.Serializer], kind: str, api_version: str) -> type[s.Serializer]:
    """The list envelope of `pagination.ListPagination`, with items of one kind."""
    fields = {
        "apiVersion": always(api_version),
        "kind": always(kind),
        "metadata": ListMeta(),
        "items": item(many=True),
        "__doc__": f"A page of {item.__name__} items (limit/offset).",
    }
    return type(kind, (Described,), fields)


class ResourceLimits(Described):
    """Credits: 1.0 is one router or broker instance; a missing key is no limit."""

    router = s.FloatField(required=False)
    broker = s.FloatField(required=False)
    aggregate = s.FloatField(required=False)


class AddressResources(Described):
    """What one address costs, in router and broker credits."""

    router = s.FloatField(required=False)
    broker = s.FloatField(required=False)


def _milliseconds() -> s.IntegerField:
    return s.IntegerField(required=False, min_value=0, max_value=validation.MAX_MILLISECONDS,
                          help_text="Milliseconds.")


class MessageTtl(Described):
    minimum = _milliseconds()
    maximum = _milliseconds()


class MessageRedelivery(Described):
    maximumDeliveryAttempts = s.IntegerField(required=False, min_value=0,
                                             max_value=validation.MAX_DELIVERY_ATTEMPTS)
    redeliveryDelay = _milliseconds()
    redeliveryDelayMultiplier = s.FloatField(required=False, min_value=0,
                                             max_value=validation.MAX_DELAY_MULTIPLIER)
    maximumDeliveryDelay = _milliseconds()


class Subscription(Described):
    maxConsumers = s.IntegerField(min_value=1, max_value=validation.MAX_CONSUMERS)


class RouterPolicy(Described):
    """Router limits of a plan (the operator's); a missing key keeps the platform's setting."""

    maxConnections = s.IntegerField(required=False, min_value=1,
                                    max_value=ROUTER_POLICY_BOUNDS["maxConnections"],
                                    help_text="Per address space.")
    maxSessions = s.IntegerField(required=False, min_value=1,
                                 max_value=ROUTER_POLICY_BOUNDS["maxSessions"],
                                 help_text="Per connection.")
    maxSenders = s.IntegerField(required=False, min_value=1,
                                max_value=ROUTER_POLICY_BOUNDS["maxSenders"],
                                help_text="Per connection.")
    maxReceivers = s.IntegerField(required=False, min_value=1,
                                  max_value=ROUTER_POLICY_BOUNDS["maxReceivers"],
                                  help_text="Per connection.")


# AddressSpace --------------------------------------------------------------------------------

class AddressSpaceSpec(Described):
    """MaaS implements type and plan; other keys of an EnMasse spec are refused (400), and a
    space stored before that shows the ones it was given."""

    type = s.ChoiceField(choices=ADDRESS_SPACE_TYPES)
    plan = s.CharField(help_text="An AddressSpacePlan of that type.")


class ServicePort(Described):
    name = s.CharField(help_text="amqp, amqps, mqtt or mqtts.")
    port = s.IntegerField()


class EndpointStatus(Described):
    name = s.CharField(help_text="messaging or mqtt.")
    serviceHost = s.CharField()
    servicePorts = ServicePort(many=True)
    virtualHost = s.CharField(
        required=False,
        help_text="The AMQP open hostname clients must send (the client's virtual host option): "
                  "`vhost:<vhost>` on brokered spaces, `<vhost>` on standard ones.")
    username = s.CharField(help_text="The login pattern, with `<username>` to fill in.")


class AddressSpacePlanStatus(Described):
    name = s.CharField()
    resourceLimits = ResourceLimits()


class AddressSpaceStatus(Described):
    phase = s.ChoiceField(choices=PHASES)
    isReady = s.BooleanField()
    messages = s.ListField(child=s.CharField())
    endpointStatuses = EndpointStatus(many=True)
    planStatus = AddressSpacePlanStatus(help_text="The plan as applied.")
    caCert = s.CharField(required=False,
                         help_text="Standard spaces with TLS: the CA certificate, base64 PEM.")


class AddressSpace(Described):
    apiVersion = always(ENMASSE)
    kind = always("AddressSpace")
    metadata = AddressSpaceMeta()
    spec = AddressSpaceSpec()
    status = AddressSpaceStatus()


class AddressSpaceManifest(Described):
    """An EnMasse AddressSpace manifest (JSON or YAML); status, if any, is ignored."""

    apiVersion = s.CharField(required=False)
    kind = s.CharField(required=False, help_text="AddressSpace, if given.")
    metadata = NamedManifestMeta()
    spec = AddressSpaceSpec()


class AddressSpaceUpdateSpec(Described):
    type = s.ChoiceField(choices=ADDRESS_SPACE_TYPES, required=False,
                         help_text="Cannot change; refused unless the current one.")
    plan = s.CharField(required=False, help_text="Required by PUT.")


class AddressSpaceUpdate(Described):
    """PUT: the whole spec (`plan` required; keys left out are gone). PATCH: a JSON merge patch
    of it (RFC 7386). Either may carry metadata.resourceVersion (or If-Match): 409 if stale."""

    apiVersion = s.CharField(required=False)
    kind = s.CharField(required=False)
    metadata = ManifestMeta(required=False)
    spec = AddressSpaceUpdateSpec(required=False)


AddressSpaceList = list_of(AddressSpace, "AddressSpaceList", ENMASSE)


# Address -------------------------------------------------------------------------------------

class AddressSpec(Described):
    address = s.CharField(max_length=200, help_text="The wire name: no spaces or control "
                                                    "characters, at most 255 bytes of UTF-8.")
    type = s.ChoiceField(choices=ADDRESS_TYPES)
    plan = s.CharField(help_text="An AddressPlan of that type, offered by the space's plan.")
    topic = s.CharField(required=False, help_text="A subscription's topic address.")
    deadletter = s.CharField(required=False, help_text="A deadletter address (queue, topic).")
    expiry = s.CharField(required=False, help_text="A deadletter address for expired messages.")
    messageTtl = MessageTtl(required=False)
    messageRedelivery = MessageRedelivery(required=False)
    subscription = Subscription(required=False)


class AddressPlanStatus(Described):
    name = s.CharField(allow_null=True)
    partitions = s.IntegerField(allow_null=True)
    resources = AddressResources(allow_null=True)


class BrokerStatus(Described):
    clusterId = s.CharField()
    containerId = s.CharField()
    state = s.CharField(help_text="Active once placed.")


class AddressStatus(Described):
    phase = s.ChoiceField(choices=PHASES)
    isReady = s.BooleanField()
    messages = s.ListField(child=s.CharField(), help_text="Why not ready, e.g. Quota exceeded.")
    planStatus = AddressPlanStatus(help_text="The plan as applied.")
    brokerStatuses = BrokerStatus(many=True, help_text="Where it is placed (empty: pending, or "
                                                       "router only).")


class Address(Described):
    apiVersion = always(ENMASSE)
    kind = always("Address")
    metadata = InSpaceMeta()
    spec = AddressSpec()
    status = AddressStatus()


class AddressManifest(Described):
    """An EnMasse Address manifest; metadata.name (`<space>.<name>`) is derived if omitted."""

    apiVersion = s.CharField(required=False)
    kind = s.CharField(required=False, help_text="Address, if given.")
    metadata = ManifestMeta(required=False)
    spec = AddressSpec()


class AddressUpdateSpec(Described):
    """address, type, topic and subscription cannot change (refused unless the current ones,
    kept when left out)."""

    address = s.CharField(required=False)
    type = s.ChoiceField(choices=ADDRESS_TYPES, required=False)
    plan = s.CharField(required=False, help_text="Required by PUT.")
    topic = s.CharField(required=False)
    deadletter = s.CharField(required=False)
    expiry = s.CharField(required=False)
    messageTtl = MessageTtl(required=False)
    messageRedelivery = MessageRedelivery(required=False)
    subscription = Subscription(required=False)


class AddressUpdate(Described):
    """PUT: the whole spec (`plan` required; deadletter, expiry, TTL and redelivery left out
    return to none). PATCH: a JSON merge patch of it (RFC 7386; null removes a field)."""

    apiVersion = s.CharField(required=False)
    kind = s.CharField(required=False)
    metadata = ManifestMeta(required=False)
    spec = AddressUpdateSpec(required=False)


AddressList = list_of(Address, "AddressList", ENMASSE)


def bulk(item: type[s.Serializer], kind: str, one, many) -> tuple:
    """The request of a POST that takes one manifest or a `<kind>List` of them (all or
    nothing), and its answer: the object, or the list of every one created."""
    manifest_list = type(f"{kind}Manifest", (Described,), {
        "apiVersion": s.CharField(required=False),
        "kind": always(kind),
        "items": item(many=True),
        "__doc__": "Several manifests at once: every one is created, or (one refused) none.",
    })
    request = PolymorphicProxySerializer(component_name=f"{item.__name__}Or{kind}",
                                         serializers=[item, manifest_list],
                                         resource_type_field_name=None)
    answer = PolymorphicProxySerializer(component_name=f"{one.__name__}Or{kind}",
                                        serializers=[one, many], resource_type_field_name=None)
    return request, answer


AddressManifestOrList, AddressOrList = bulk(AddressManifest, "AddressList", Address,
                                            AddressList)


# MessagingUser -------------------------------------------------------------------------------

class AuthorizationRule(Described):
    addresses = s.ListField(child=s.CharField(), help_text="Address patterns; `*` at the end.")
    operations = s.ListField(child=s.ChoiceField(choices=OPERATIONS))


class Authentication(Described):
    type = s.ChoiceField(choices=AUTHENTICATION_TYPES)


class PasswordAuthentication(Described):
    type = s.ChoiceField(choices=AUTHENTICATION_TYPES, required=False)
    password = s.CharField(help_text="Base64 of the password (8 characters or more), as in "
                                     "EnMasse; stored only as a salted hash.")


class MessagingUserSpec(Described):
    username = s.CharField()
    authentication = Authentication()
    authorization = AuthorizationRule(many=True)


class MessagingUserStatus(Described):
    phase = s.ChoiceField(choices=["Configuring", "Active"])
    message = s.CharField(allow_blank=True)
    connectionUrl = s.CharField(help_text="An AMQP URL with a `<password>` placeholder.")
    connectionUrls = s.ListField(
        child=s.CharField(),
        help_text="One URL per protocol endpoint of the space (amqp, amqps, mqtt, mqtts), the login "
                  "included and the password left out; a brokered space's AMQP URLs name "
                  "the vhost in `amqp.vhost`.")


class MessagingUser(Described):
    apiVersion = always(USER_API)
    kind = always("MessagingUser")
    metadata = InSpaceMeta()
    spec = MessagingUserSpec()
    status = MessagingUserStatus()


class MessagingUserManifestSpec(Described):
    username = s.CharField()
    authentication = PasswordAuthentication()
    authorization = AuthorizationRule(many=True, required=False)


class MessagingUserManifest(Described):
    """An EnMasse MessagingUser manifest; metadata.name is `<space>.<username>` if omitted."""

    apiVersion = s.CharField(required=False)
    kind = s.CharField(required=False, help_text="MessagingUser, if given.")
    metadata = ManifestMeta(required=False)
    spec = MessagingUserManifestSpec()


class MessagingUserUpdateSpec(Described):
    username = s.CharField(required=False, help_text="Cannot change.")
    authentication = PasswordAuthentication(required=False, help_text="A new password; "
                                            "left out, the password stays (it is write-only).")
    authorization = AuthorizationRule(many=True, required=False,
                                      help_text="The rules; left out of a PUT, none.")


class MessagingUserUpdate(Described):
    """PUT: the whole spec; PATCH: a JSON merge patch of it (RFC 7386; a list replaces)."""

    apiVersion = s.CharField(required=False)
    kind = s.CharField(required=False)
    metadata = ManifestMeta(required=False)
    spec = MessagingUserUpdateSpec(required=False)


MessagingUserList = list_of(MessagingUser, "MessagingUserList", USER_API)
MessagingUserManifestOrList, MessagingUserOrList = bulk(
    MessagingUserManifest, "MessagingUserList", MessagingUser, MessagingUserList)


# Plans ---------------------------------------------------------------------------------------

class PlanMeta(Described):
    name = s.CharField()
    resourceVersion = s.CharField()


class PlanStatus(Described):
    phase = s.ChoiceField(choices=["Active"])


class Display(Described):
    displayName = s.CharField(allow_blank=True)
    displayOrder = s.IntegerField()
    shortDescription = s.CharField(allow_blank=True)
    longDescription = s.CharField(allow_blank=True)


class AddressSpacePlanSpec(Display):
    addressSpaceType = s.ChoiceField(choices=ADDRESS_SPACE_TYPES)
    resourceLimits = ResourceLimits()
    routerPolicy = RouterPolicy()
    addressPlans = s.ListField(child=s.CharField(), help_text="Names of the address plans "
                                                              "it offers.")
    infraConfigRef = s.CharField(allow_blank=True)


class AddressSpacePlan(Described):
    apiVersion = always(ADMIN_API)
    kind = always("AddressSpacePlan")
    metadata = PlanMeta()
    spec = AddressSpacePlanSpec()
    status = PlanStatus()


class AddressPlanSpec(Display):
    addressType = s.ChoiceField(choices=ADDRESS_TYPES)
    resources = AddressResources()
    partitions = s.IntegerField()
    messageTtl = MessageTtl(required=False)
    messageRedelivery = MessageRedelivery(required=False)


class AddressPlan(Described):
    apiVersion = always(ADMIN_API)
    kind = always("AddressPlan")
    metadata = PlanMeta()
    spec = AddressPlanSpec()
    status = PlanStatus()


AddressSpacePlanList = list_of(AddressSpacePlan, "AddressSpacePlanList",
                               ADMIN_API)
AddressPlanList = list_of(AddressPlan, "AddressPlanList", ADMIN_API)


class DisplayInput(Described):
    displayName = s.CharField(required=False, allow_blank=True, max_length=200)
    displayOrder = s.IntegerField(required=False, help_text="Default 0.")
    shortDescription = s.CharField(required=False, allow_blank=True, max_length=300)
    longDescription = s.CharField(required=False, allow_blank=True)


class AddressSpacePlanInputSpec(DisplayInput):
    """An omitted field takes its default: no limits, no address plans, no router policy."""

    addressSpaceType = s.ChoiceField(choices=ADDRESS_SPACE_TYPES)
    resourceLimits = ResourceLimits(required=False)
    routerPolicy = RouterPolicy(required=False)
    addressPlans = s.ListField(child=s.CharField(), required=False,
                               help_text="Names of existing address plans for that type.")
    infraConfigRef = s.CharField(required=False, help_text="Default `default`.")


class AddressPlanInputSpec(DisplayInput):
    """An omitted field takes its default: no credits, one partition, no TTL or redelivery."""

    addressType = s.ChoiceField(choices=ADDRESS_TYPES)
    resources = AddressResources(required=False)
    partitions = s.IntegerField(required=False, min_value=1, max_value=100)
    messageTtl = MessageTtl(required=False)
    messageRedelivery = MessageRedelivery(required=False)


def _plan_bodies(kind: str, spec: type[s.Serializer]) -> tuple:
    manifest = type(f"{kind}Manifest", (Described,), {
        "apiVersion": s.CharField(required=False),
        "kind": s.CharField(required=False, help_text=f"{kind}, if given."),
        "metadata": NamedManifestMeta(),
        "spec": spec(),
        "__doc__": f"An EnMasse {kind} manifest (admin.enmasse.io/v1beta2), for operators.",
    })
    update = type(f"{kind}Update", (Described,), {
        "apiVersion": s.CharField(required=False),
        "kind": s.CharField(required=False),
        "metadata": ManifestMeta(required=False),
        "spec": spec(required=False),
        "__doc__": "PUT: the whole spec (left out: defaults). PATCH: a JSON merge patch of it "
                   "(RFC 7386). A stale metadata.resourceVersion (or If-Match) is a 409.",
    })
    return manifest, update


AddressSpacePlanManifest, AddressSpacePlanUpdate = _plan_bodies("AddressSpacePlan",
                                                                AddressSpacePlanInputSpec)
AddressPlanManifest, AddressPlanUpdate = _plan_bodies("AddressPlan", AddressPlanInputSpec)


# Tenant --------------------------------------------------------------------------------------

class TenantMeta(Described):
    name = s.CharField()
    uid = s.UUIDField()
    creationTimestamp = s.DateTimeField()


class TenantSpec(Described):
    displayName = s.CharField(allow_blank=True, required=False,
                              max_length=validation.MAX_DISPLAY_NAME)


class TenantStatus(Described):
    role = s.ChoiceField(choices=ROLES, allow_null=True,
                         help_text="Yours; null for staff who are not a member, and once "
                                   "Terminating.")
    phase = s.ChoiceField(choices=["Active", "Terminating"])
    deletionTimestamp = s.DateTimeField(required=False)
    terminatingAddressSpaces = s.ListField(child=s.CharField(), required=False,
                                           help_text="Being torn down (in the answer to DELETE).")


class Tenant(Described):
    apiVersion = always(MAAS_API)
    kind = always("Tenant")
    metadata = TenantMeta()
    spec = TenantSpec()
    status = TenantStatus()


class TenantManifest(Described):
    apiVersion = s.CharField(required=False)
    kind = s.CharField(required=False, help_text="Tenant, if given.")
    metadata = NamedManifestMeta()
    spec = TenantSpec(required=False)


TenantList = list_of(Tenant, "TenantList", MAAS_API)


# Config events -------------------------------------------------------------------------------

@extend_schema_field({"type": "object", "additionalProperties": True,
                      "description": "The event's fields (per type); password hashes are "
                                     "`<redacted>`."})
class Payload(s.DictField):
    pass


class ConfigEvent(Described):
    position = s.IntegerField(help_text="Global order; pass it as `after` to read on.")
    stream = s.UUIDField(help_text="The uid of the address space (or tenant, or the plans "
                                   "stream) it belongs to.")
    sequence = s.IntegerField(help_text="Per stream: 1, 2, 3, ...")
    type = s.CharField(help_text="One of: " + ", ".join(EVENT_TYPES) + " (more may come).")
    schemaVersion = s.IntegerField()
    payload = Payload()
    actor = s.CharField(help_text="Who: `user:<name>`, `token:<token>:<name>`, `system`, ...")
    requestId = s.CharField(allow_blank=True)
    time = s.DateTimeField()


ConfigEventList = list_of(ConfigEvent, "ConfigEventList", MAAS_API)


# Usage ---------------------------------------------------------------------------------------

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


class ThrottledLimit(Described):
    """A breached limit, as `tenant.throttled` recorded it."""

    limit = s.CharField(help_text="messages_per_day, bytes_per_day, stored_bytes or "
                                  "peak_connections.")
    used = s.IntegerField(help_text="What was measured (docs/usage.md, \"Quotas\").")
    limit_value = s.IntegerField(help_text="The limit it is over.")


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


# Tenant quota --------------------------------------------------------------------------------

_INT, _BIG = 2**31 - 1, 2**63 - 1  # the columns' ranges (PostgreSQL integer and bigint)
_LIMITS = {  # field: (help text, highest value; None: a number, not an integer)
    "max_address_spaces": ("Address spaces at a time.", _INT),
    "max_addresses": ("Addresses over all its address spaces.", _INT),
    "max_messaging_users": ("Messaging users over all its address spaces.", _INT),
    "max_credits": ("Router and broker credits over all its address spaces (1.0: one "
                    "instance).", None),
    "messages_per_day": ("messages_in + messages_out in one UTC day (docs/usage.md).", _BIG),
    "bytes_per_day": ("bytes_in + bytes_out in one UTC day (docs/usage.md).", _BIG),
    "stored_bytes": ("Peak of the stored bytes, per hour summed over address spaces.", _BIG),
    "peak_connections": ("Peak of the client connections, per hour summed over address "
                         "spaces.", _BIG),
}


def _limit(help_text: str, maximum: int | None, required: bool) -> s.Field:
    if maximum is None:
        return s.FloatField(allow_null=True, min_value=0, required=required, help_text=help_text)
    return s.IntegerField(allow_null=True, min_value=0, max_value=maximum, required=required,
                          help_text=help_text)


def _quota_spec(name: str, required: bool, doc: str) -> type[s.Serializer]:
    fields = {key: _limit(text, top, required) for key, (text, top) in _LIMITS.items()}
    return type(name, (Described,), {**fields, "__doc__": doc})


TenantQuotaSpec = _quota_spec(
    "TenantQuotaSpec", True,
    "The tenant's limits; null is no limit. Over a usage limit (per day or peak, "
    "docs/quotas.md) the tenant is throttled: new senders are refused.")
TenantQuotaPatchSpec = _quota_spec(
    "TenantQuotaPatchSpec", False, "Some of the limits; the others stay. Null is no limit.")


class TenantQuotaStatus(Described):
    throttled = s.BooleanField(help_text="Over a usage limit: new senders are refused.")
    throttledLimits = ThrottledLimit(many=True)
    throttleAction = s.CharField(help_text="What a breach does: `refuse-senders`.")
    overrideUntil = s.DateTimeField(allow_null=True, help_text="An operator override: no "
                                                               "throttling until then.")


class TenantQuotaMeta(Described):
    name = s.CharField(help_text="The tenant's name.")


class TenantQuota(Described):
    apiVersion = always(MAAS_API)
    kind = always("TenantQuota")
    metadata = TenantQuotaMeta()
    spec = TenantQuotaSpec()
    status = TenantQuotaStatus()


class TenantQuotaUpdate(Described):
    """PUT: every limit (operators). Any other key of `spec` is refused, naming it."""

    apiVersion = s.CharField(required=False)
    kind = s.CharField(required=False, help_text="TenantQuota, if given.")
    spec = TenantQuotaSpec()


class TenantQuotaPatch(Described):
    """PATCH: some limits (operators). Any other key of `spec` is refused, naming it."""

    apiVersion = s.CharField(required=False)
    kind = s.CharField(required=False, help_text="TenantQuota, if given.")
    spec = TenantQuotaPatchSpec()
