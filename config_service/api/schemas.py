"""OpenAPI types of the address-space bodies of the API: serializers that only describe, never
render (core/api/schemas.py says why). The views render with `resources.py`; these say field by field what that returns (and what a
posted manifest may hold), so that /api/schema/ types every body and a client can be generated
from it. Enums are closed sets the code checks (phases, address and space types, operations,
roles); `kind`, `apiVersion` and event types are strings, so that a new value breaks no client.

One module of 680-odd lines: it is the one description of the space-scoped API's bodies
(spaces, addresses, messaging users, connections, plans), which share its metadata, credit and
list pieces; split, each part would import the others' pieces back.
"""
from drf_spectacular.utils import PolymorphicProxySerializer
from rest_framework import serializers as s

from core.api.manifests import ADMIN_API, ENMASSE, MAAS_API, USER_API
from core.api.schemas import (
    Described,
    ManifestMeta,
    NamedManifestMeta,
    ObjectMeta,
    always,
    list_of,
)
from tenants.models import AddressSpaceType, AddressType
from tenants.router_policy import ROUTER_POLICY_BOUNDS

from .. import validation
from ..readings import PROTOCOLS, VIA
from ..status import PHASES

ADDRESS_SPACE_TYPES = AddressSpaceType.values
ADDRESS_TYPES = AddressType.values
OPERATIONS = list(validation.OPERATIONS)
AUTHENTICATION_TYPES = ["password"]


class AddressSpaceMeta(ObjectMeta):
    uid = s.UUIDField()


class InSpaceMeta(ObjectMeta):
    """Metadata of an Address or a MessagingUser: its name is `<space>.<name>`."""

    addressSpace = s.CharField()


class ResourceLimits(Described):
    """Credits: 1.0 is one router or broker instance; a missing key is no limit."""

    router = s.FloatField(required=False)
    broker = s.FloatField(required=False)
    aggregate = s.FloatField(required=False)


class AddressResources(Described):
    """What one address costs, in router and broker credits."""

    router = s.FloatField(required=False)
    broker = s.FloatField(required=False)


NOT_ENFORCED = ("Not enforced here, so only 0 (nothing) is taken; another value is refused "
                "(400) unless stored before.")


def _milliseconds(help_text: str = "Milliseconds.") -> s.IntegerField:
    return s.IntegerField(required=False, min_value=0, max_value=validation.MAX_MILLISECONDS,
                          help_text=help_text)


class MessageTtl(Described):
    minimum = _milliseconds(f"Milliseconds. {NOT_ENFORCED}")
    maximum = _milliseconds()


class MessageRedelivery(Described):
    maximumDeliveryAttempts = s.IntegerField(required=False, min_value=0,
                                             max_value=validation.MAX_DELIVERY_ATTEMPTS)
    redeliveryDelay = _milliseconds(f"Milliseconds. {NOT_ENFORCED}")
    redeliveryDelayMultiplier = s.FloatField(
        required=False, min_value=0, max_value=validation.MAX_DELAY_MULTIPLIER,
        help_text="Not enforced here, so only 0 or 1 (nothing) is taken; another value is "
                  "refused (400) unless stored before.")
    maximumDeliveryDelay = _milliseconds(f"Milliseconds. {NOT_ENFORCED}")


class Subscription(Described):
    maxConsumers = s.IntegerField(min_value=1, max_value=validation.MAX_CONSUMERS)


class RouterPolicy(Described):
    """Router limits of a plan (the operator's); a missing key keeps the platform's setting."""

    maxConnections = s.IntegerField(required=False, min_value=1,
                                    max_value=ROUTER_POLICY_BOUNDS["maxConnections"],
                                    help_text="Per address space.")
    maxConnectionsPerUser = s.IntegerField(
        required=False, min_value=1, max_value=ROUTER_POLICY_BOUNDS["maxConnectionsPerUser"],
        help_text="Per messaging user, in the address space.")
    maxConnectionsPerHost = s.IntegerField(
        required=False, min_value=1, max_value=ROUTER_POLICY_BOUNDS["maxConnectionsPerHost"],
        help_text="Per client host (source address), in the address space.")
    maxSessions = s.IntegerField(required=False, min_value=1,
                                 max_value=ROUTER_POLICY_BOUNDS["maxSessions"],
                                 help_text="Per connection.")
    maxSenders = s.IntegerField(required=False, min_value=1,
                                max_value=ROUTER_POLICY_BOUNDS["maxSenders"],
                                help_text="Per connection.")
    maxReceivers = s.IntegerField(required=False, min_value=1,
                                  max_value=ROUTER_POLICY_BOUNDS["maxReceivers"],
                                  help_text="Per connection.")
    maxMessageSize = s.IntegerField(required=False, min_value=1,
                                    max_value=ROUTER_POLICY_BOUNDS["maxMessageSize"],
                                    help_text="Bytes of one message; a larger one is rejected "
                                              "and its connection closed.")


# AddressSpace --------------------------------------------------------------------------------

class EndpointCert(Described):
    provider = s.ChoiceField(choices=["selfsigned", "certBundle"], required=False,
                             help_text="selfsigned (default): a CA of the space's own, in "
                                       "status.caCert; certBundle: the tenant's key and chain.")
    tlsCert = s.CharField(required=False,
                          help_text="certBundle: base64 of the PEM chain, the server's "
                                    "certificate first; valid now and for the host.")
    tlsKey = s.CharField(required=False, write_only=True,
                         help_text="certBundle: base64 of the unencrypted PEM key of the first "
                                   "certificate. Write-only, stored encrypted; left out of a "
                                   "PUT, the stored key stays.")


class EndpointExpose(Described):
    type = s.ChoiceField(choices=["route", "loadbalancer", "nodeport"], required=False,
                         help_text="On Kubernetes, the space router's Service: LoadBalancer, "
                                   "NodePort, or (route) the platform's type.")
    routeHost = s.CharField(required=False,
                            help_text="The host name clients connect to and check the "
                                      "certificate against (SNI); one space's only. Default "
                                      "<name>.<space>.<tenant>.<MAAS_ENDPOINT_DOMAIN>.")


class EndpointSpec(Described):
    name = s.CharField(help_text="A DNS label, unique in the space.")
    service = s.ChoiceField(choices=["messaging", "mqtt"], required=False,
                            help_text="messaging (AMQP, AMQPS) or mqtt (MQTT, MQTTS); default "
                                      "the name.")
    cert = EndpointCert(required=False)
    expose = EndpointExpose(required=False)


class SecretValue(Described):
    """EnMasse's StringOrSecretSelector: the value itself (valueFromSecret is refused)."""

    value = s.CharField()


class WriteOnlySecretValue(Described):
    value = s.CharField(write_only=True)


class ConnectorEndpointHost(Described):
    host = s.CharField(help_text="A DNS name or an IP address.")
    port = s.IntegerField(required=False, min_value=1, max_value=65535,
                          help_text="Default 5672.")


class ConnectorTls(Described):
    caCert = SecretValue(required=False,
                         help_text="PEM (or base64 of PEM) of the CAs the remote endpoint's "
                                   "certificate must chain to; default the system's.")
    clientCert = SecretValue(required=False, help_text="PEM chain presented to the remote.")
    clientKey = WriteOnlySecretValue(required=False,
                                     help_text="Unencrypted PEM key of clientCert. Write-only, "
                                               "stored encrypted; left out of a PUT, the "
                                               "stored key stays.")


class ConnectorCredentials(Described):
    username = SecretValue()
    password = WriteOnlySecretValue(required=False,
                                    help_text="Write-only, stored encrypted; left out of a "
                                              "PUT, the stored password stays.")


class ConnectorAddress(Described):
    name = s.CharField(help_text="A DNS label, unique in the connector.")
    pattern = s.CharField(help_text="Remote addresses clients reach as "
                                    "<connector>/<address>: '/' or '.' between tokens, '*' "
                                    "one token, '#' any number.")


class ConnectorSpec(Described):
    name = s.CharField(help_text="Letters and digits, unique in the space.")
    endpointHosts = ConnectorEndpointHost(many=True, help_text="Tried in order.")
    tls = ConnectorTls(required=False, help_text="TLS to the remote, its host name checked.")
    credentials = ConnectorCredentials(required=False,
                                       help_text="SASL PLAIN; without, EXTERNAL with a client "
                                                 "certificate, else ANONYMOUS.")
    addresses = ConnectorAddress(many=True)
    idleTimeout = s.IntegerField(required=False, min_value=0, max_value=3600,
                                 help_text="Seconds.")
    maxFrameSize = s.IntegerField(required=False, min_value=512, help_text="Bytes.")
    role = s.ChoiceField(choices=["route-container"], required=False)


class AddressSpaceSpec(Described):
    """MaaS implements type, plan, endpoints and connectors; other keys of an EnMasse spec are
    refused (400), and a space stored before that shows the ones it was given."""

    type = s.ChoiceField(choices=ADDRESS_SPACE_TYPES)
    plan = s.CharField(help_text="An AddressSpacePlan of that type.")
    endpoints = EndpointSpec(many=True, required=False,
                             help_text="Host names and certificates per protocol "
                                       "(docs/api.md, \"Endpoints\").")
    connectors = ConnectorSpec(many=True, required=False,
                               help_text="Remote AMQP endpoints, standard spaces on qdrouterd "
                                         "(docs/api.md, \"Connectors\").")


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
    externalHost = s.CharField(required=False,
                               help_text="The space's endpoint host for this protocol "
                                         "(spec.endpoints): connect and check the certificate "
                                         "with this name.")
    cert = s.CharField(required=False, help_text="That endpoint's certificate provider.")
    failoverUrls = s.ListField(
        child=s.CharField(), required=False,
        help_text="A standard space served by a mesh of routers: every router's URL for each "
                  "port, the first first. A client reconnects through them when its router "
                  "goes away (Qpid JMS: `failover:(<url>,<url>,...)`).")


class AddressSpacePlanStatus(Described):
    name = s.CharField()
    resourceLimits = ResourceLimits()


class ConnectorStatus(Described):
    name = s.CharField()
    isReady = s.BooleanField()
    messages = s.ListField(child=s.CharField(),
                           help_text="Why not ready: unreachable, authentication refused, TLS "
                                     "failure, not yet configured.")


class AddressSpaceStatus(Described):
    phase = s.ChoiceField(choices=PHASES)
    isReady = s.BooleanField()
    messages = s.ListField(child=s.CharField())
    endpointStatuses = EndpointStatus(many=True)
    planStatus = AddressSpacePlanStatus(help_text="The plan as applied.")
    caCert = s.CharField(required=False,
                         help_text="Spaces with TLS (AMQPS, MQTTS): the CA certificate of their "
                                   "endpoints, base64 PEM.")
    connectors = ConnectorStatus(many=True, required=False,
                                 help_text="Spaces with spec.connectors: each as its routers "
                                           "tell it now.")


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
    endpoints = EndpointSpec(many=True, required=False)
    connectors = ConnectorSpec(many=True, required=False)


class AddressSpaceUpdate(Described):
    """PUT: the whole spec (`plan` required; keys left out are gone). PATCH: a JSON merge patch
    of it (RFC 7386). Either may carry metadata.resourceVersion (or If-Match): 409 if stale."""

    apiVersion = s.CharField(required=False)
    kind = s.CharField(required=False)
    metadata = ManifestMeta(required=False)
    spec = AddressSpaceUpdateSpec(required=False)


AddressSpaceList = list_of(AddressSpace, "AddressSpaceList", ENMASSE)


# Address -------------------------------------------------------------------------------------

class Forwarder(Described):
    """A queue's or subscription's forwarder (EnMasse's AddressSpecForwarder)."""

    name = s.CharField(max_length=63, help_text="Letters and digits, unique on the address.")
    remoteAddress = s.CharField(help_text="`<connector>/<address>`: a connector of the "
                                          "address's space, then the remote address.")
    direction = s.ChoiceField(choices=["in", "out"], help_text="out: the local queue to the "
                              "remote; in: the remote into the local queue (a subscription: "
                              "out only).")
    priority = s.IntegerField(required=False, help_text="The forwarder's consumer priority.")


class AddressSpec(Described):
    address = s.CharField(max_length=200, help_text="The wire name: printable ASCII, no "
                                                    "spaces.")
    type = s.ChoiceField(choices=ADDRESS_TYPES)
    plan = s.CharField(help_text="An AddressPlan of that type, offered by the space's plan.")
    topic = s.CharField(required=False, help_text="A subscription's topic address.")
    deadletter = s.CharField(required=False, help_text="A deadletter address (queue, topic).")
    expiry = s.CharField(required=False, help_text="A deadletter address for expired messages.")
    messageTtl = MessageTtl(required=False)
    messageRedelivery = MessageRedelivery(required=False)
    subscription = Subscription(required=False)
    forwarders = Forwarder(many=True, required=False,
                           help_text="Not available yet: valid forwarders are refused "
                                     "with a 400 (docs/api.md, Forwarders).")


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
    forwarders = Forwarder(many=True, required=False,
                           help_text="Not available yet: valid forwarders are refused "
                                     "with a 400 (docs/api.md, Forwarders).")


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


# Connections ---------------------------------------------------------------------------------

class ConnectionMeta(Described):
    name = s.CharField(help_text="The connection's id in its space: `router-<n>` (on router "
                                 "k of a mesh `router<k>-<n>`) or `broker-<base64url>`; "
                                 "stable while it lives.")
    namespace = s.CharField(help_text="The tenant's name.")
    addressSpace = s.CharField()
    creationTimestamp = s.DateTimeField(allow_null=True, help_text="When it opened.")


class ConnectionSpec(Described):
    hostname = s.CharField(allow_blank=True, help_text="The client's address and port.")
    containerId = s.CharField(allow_blank=True, help_text="The AMQP container id, or the MQTT "
                                                          "client id.")
    protocol = s.CharField(help_text="One of " + ", ".join(PROTOCOLS) + ".")
    encrypted = s.BooleanField()
    principal = s.CharField(allow_blank=True, help_text="The messaging user.")
    saslMechanism = s.CharField(allow_blank=True)
    via = s.CharField(help_text="What holds it: " + ", ".join(VIA) + ".")
    properties = s.DictField(help_text="The client's connection properties (bounded).")


class ConnectionMetrics(Described):
    messagesIn = s.IntegerField(help_text="Messages the client sent.")
    messagesOut = s.IntegerField(help_text="Messages the client received.")
    senders = s.IntegerField()
    receivers = s.IntegerField()


class LinkMetrics(Described):
    deliveries = s.IntegerField(required=False)
    credit = s.IntegerField(required=False, help_text="Credit (prefetch on a broker).")
    unsettled = s.IntegerField(required=False)
    accepted = s.IntegerField(required=False)
    rejected = s.IntegerField(required=False)
    released = s.IntegerField(required=False)
    modified = s.IntegerField(required=False)
    presettled = s.IntegerField(required=False)
    undelivered = s.IntegerField(required=False)


class ConnectionLink(Described):
    name = s.CharField(allow_blank=True)
    role = s.ChoiceField(choices=["sender", "receiver"], help_text="The client's side.")
    address = s.CharField(allow_blank=True)
    metrics = LinkMetrics()


class Connection(Described):
    apiVersion = always(MAAS_API)
    kind = always("Connection")
    metadata = ConnectionMeta()
    spec = ConnectionSpec()
    metrics = ConnectionMetrics()


class ConnectionDetail(Connection):
    links = ConnectionLink(many=True)


ConnectionList = list_of(Connection, "ConnectionList", MAAS_API)


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
    infraConfigRef = s.CharField(required=False, help_text="Default `default`: one of the "
                                                           "operator's infra configs (400 "
                                                           "otherwise).")


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
