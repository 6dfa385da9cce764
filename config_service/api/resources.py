"""EnMasse-shaped resources: rendering of projections, and reading of posted manifests."""
import base64
from urllib.parse import quote

from django.conf import settings

from maas.core.errors import Invalid
from tenants.models import QUOTA_FIELDS

from .. import brokers, dataplane, plan_specs
from ..status import address_status, agents_needed, space_status

ENMASSE = "enmasse.io/v1beta1"
USER_API = "user.enmasse.io/v1beta1"
ADMIN_API = "admin.enmasse.io/v1beta2"
MAAS_API = "maas.io/v1"


def _ts(value) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def _metadata(name, namespace, version, created, **extra) -> dict:
    meta = {"name": name, "namespace": namespace, "resourceVersion": str(version),
            "creationTimestamp": _ts(created)}
    meta.update(extra)
    return meta


def endpoints(space) -> list[dict]:
    """Where clients connect (EnMasse status.endpointStatuses)."""
    if space.type == "brokered":
        broker = brokers.pooled_broker(space.broker)  # its broker of the pool
        return [
            {"name": "messaging", "serviceHost": settings.MAAS_PUBLIC_HOST,
             "servicePorts": [{"name": "amqp", "port": broker.amqp_port}],
             "virtualHost": f"vhost:{space.vhost}", "username": f"<username>@{space.vhost}"},
            {"name": "mqtt", "serviceHost": settings.MAAS_PUBLIC_HOST,
             "servicePorts": [{"name": "mqtt", "port": broker.mqtt_port}],
             "username": f"{space.vhost}:<username>@{space.vhost}"},
        ]
    tls = bool(_ca_cert(space))
    ports = [{"name": "amqp", "port": settings.MAAS_ROUTER_AMQP_PORT}]
    if tls:
        ports.append({"name": "amqps", "port": settings.MAAS_ROUTER_AMQPS_PORT})
    # The AMQP open hostname selects the space on the router: qdrouterd's vhost policy and
    # address prefix follow it alone (the embedded router also reads `user@vhost`).
    out = [{"name": "messaging", "serviceHost": settings.MAAS_PUBLIC_HOST, "servicePorts": ports,
            "virtualHost": space.vhost, "username": f"<username>@{space.vhost}"}]
    if settings.MAAS_MQTT_GATEWAY_ENABLED:
        # The MQTT gateway (docs/mqtt.md): the login names the space, MQTTS has the router's
        # certificate (the same CA as AMQPS).
        mqtt = [{"name": "mqtt", "port": settings.MAAS_MQTT_GATEWAY_PORT}]
        if tls:
            mqtt.append({"name": "mqtts", "port": settings.MAAS_MQTT_GATEWAY_TLS_PORT})
        out.append({"name": "mqtt", "serviceHost": settings.MAAS_PUBLIC_HOST,
                    "servicePorts": mqtt, "username": f"<username>@{space.vhost}"})
    return out


def _ca_cert(space) -> str:
    return dataplane.get().ca_cert(space)


def connection_url(space, username: str) -> str:
    """A ready-to-paste AMQP URL for a messaging user (the password is theirs to fill in)."""
    endpoint = endpoints(space)[0]
    port = endpoint["servicePorts"][0]["port"]
    login = quote(f"{username}@{space.vhost}", safe="")
    return f"amqp://{login}:<password>@{endpoint['serviceHost']}:{port}"


def connection_urls(space, username: str) -> list[str]:
    """One URL per protocol endpoint of the space, for this user: the login included, the
    password left out (a client asks for it or takes it apart). RabbitMQ picks a brokered
    space's vhost from the AMQP open hostname, which a URL cannot carry: `amqp.vhost` (Qpid
    JMS's option) names it; MQTT (RabbitMQ's, or the gateway of standard spaces) takes the
    space from the username."""
    urls = []
    for endpoint in endpoints(space):
        login = endpoint["username"].replace("<username>", username)
        for port in endpoint["servicePorts"]:
            url = f"{port['name']}://{quote(login, safe='')}@{endpoint['serviceHost']}:{port['port']}"
            if space.type == "brokered" and port["name"].startswith("amqp"):
                url += f"?amqp.vhost={quote(endpoint['virtualHost'], safe='')}"
            urls.append(url)
    return urls


def address_space(space, states: dict) -> dict:
    status = space_status(space, states)
    return {
        "apiVersion": ENMASSE,
        "kind": "AddressSpace",
        "metadata": _metadata(space.name, space.tenant.slug, space.resource_version,
                              space.created_at, uid=str(space.uid)),
        "spec": {**space.spec, "type": space.type, "plan": space.plan},
        "status": {
            "phase": status.phase,
            "isReady": status.is_ready,
            "messages": status.messages,
            "endpointStatuses": endpoints(space),
            "planStatus": space.plan_status,
            **({"caCert": base64.b64encode(_ca_cert(space).encode()).decode()}
               if space.type == "standard" and _ca_cert(space) else {}),
        },
    }


def address(space, addr, states: dict) -> dict:
    status = address_status(space, addr, states)
    spec = {"address": addr.address, "type": addr.type, "plan": addr.plan, **addr.spec}
    for field in ("topic", "deadletter", "expiry"):
        if getattr(addr, field):
            spec[field] = getattr(addr, field)
    body = {
        "phase": status.phase,
        "isReady": status.is_ready,
        "messages": status.messages,
        "planStatus": {k: addr.plan_status.get(k) for k in ("name", "partitions", "resources")},
        "brokerStatuses": addr.placement,
    }
    return {
        "apiVersion": ENMASSE,
        "kind": "Address",
        "metadata": _metadata(addr.name, space.tenant.slug, addr.resource_version,
                              addr.created_at, addressSpace=space.name),
        "spec": spec,
        "status": body,
    }


def messaging_user(space, user, states: dict) -> dict:
    applied = all(
        states.get(kind) is not None and states[kind].applied_sequence >= user.resource_version
        and not states[kind].invalidated
        for kind in agents_needed(space.type)
    )
    return {
        "apiVersion": USER_API,
        "kind": "MessagingUser",
        "metadata": _metadata(user.name, space.tenant.slug, user.resource_version,
                              user.created_at, addressSpace=space.name),
        "spec": {"username": user.username, "authentication": {"type": "password"},
                 "authorization": user.authorization},
        "status": {"phase": "Active" if applied else "Configuring",
                   "message": "" if applied else "Waiting for the agents",
                   "connectionUrl": connection_url(space, user.username),
                   "connectionUrls": connection_urls(space, user.username)},
    }


def tenant(t, role: str | None, terminating_spaces: list[str] | None = None) -> dict:
    status = {"role": role, "phase": "Active"}
    if t.deleted_at is not None:
        status = {"role": None, "phase": "Terminating", "deletionTimestamp": _ts(t.deleted_at),
                  "terminatingAddressSpaces": terminating_spaces or []}
    return {
        "apiVersion": MAAS_API,
        "kind": "Tenant",
        "metadata": {"name": t.slug, "uid": str(t.uid), "creationTimestamp": _ts(t.created_at)},
        "spec": {"displayName": t.name},
        "status": status,
    }


def tenant_quota(quota) -> dict:
    """A tenant's limits (spec: operators set them) and their enforcement (status)."""
    return {
        "apiVersion": MAAS_API,
        "kind": "TenantQuota",
        "metadata": {"name": quota.tenant.slug},
        "spec": {field: getattr(quota, field) for field in QUOTA_FIELDS},
        "status": {
            "throttled": quota.throttled,
            "throttledLimits": quota.throttled_limits,
            "throttleAction": quota.throttle_action,
            "overrideUntil": _ts(quota.override_until) if quota.override_until else None,
        },
    }


def address_space_plan(plan) -> dict:
    names = sorted(p.name for p in plan.address_plans.all())
    return {"apiVersion": ADMIN_API, "kind": "AddressSpacePlan",
            "metadata": {"name": plan.name, "resourceVersion": str(plan.resource_version)},
            "spec": plan_specs.space_plan_spec(plan, names), "status": {"phase": "Active"}}


def address_plan(plan) -> dict:
    return {"apiVersion": ADMIN_API, "kind": "AddressPlan",
            "metadata": {"name": plan.name, "resourceVersion": str(plan.resource_version)},
            "spec": plan_specs.address_plan_spec(plan), "status": {"phase": "Active"}}


def event(e, public_payload) -> dict:
    return {
        "position": e.position,
        "stream": str(e.stream_id),
        "sequence": e.sequence,
        "type": e.type,
        "schemaVersion": e.schema_version,
        "payload": public_payload(e.payload),
        "actor": e.actor,
        "requestId": e.request_id,
        "time": e.created_at.isoformat(),
    }


# Reading manifests --------------------------------------------------------------------------

def read(body, kind: str) -> tuple[dict, dict]:
    """(metadata, spec) of a posted manifest; `kind`, if given, must match."""
    if not isinstance(body, dict):
        raise Invalid(f"the body must be a {kind} object (JSON or YAML)", "body")
    given = body.get("kind")
    if given is not None and given != kind:
        raise Invalid(f"kind must be {kind}, not {given}", "kind")
    metadata = body.get("metadata") or {}
    spec = body.get("spec") or {}
    if not isinstance(metadata, dict):
        raise Invalid("must be an object", "metadata")
    if not isinstance(spec, dict):
        raise Invalid("must be an object", "spec")
    return metadata, spec


def created_list(kind: str, api_version: str, items: list[dict]) -> dict:
    """The answer to a bulk POST: every item created, in the list envelope."""
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"totalItems": len(items), "next": None, "previous": None},
            "items": items}


def list_items(body, kind: str) -> list | None:
    """The items of a posted `<kind>List` (bulk create), or None if the body is one object."""
    if not isinstance(body, dict) or body.get("kind") != f"{kind}List":
        return None
    items = body.get("items")
    if not isinstance(items, list) or not items:
        raise Invalid(f"a {kind}List needs a non-empty list of {kind} items", "items")
    return items


def quota_spec(body, partial: bool) -> dict:
    """The limits of a posted TenantQuota: every one for PUT, some for PATCH; the service
    checks their values."""
    _, spec = read(body, "TenantQuota")
    for key in spec:
        if key not in QUOTA_FIELDS:
            raise Invalid(f"unknown quota field; the limits are {', '.join(QUOTA_FIELDS)}",
                          f"spec.{key}")
    missing = [field for field in QUOTA_FIELDS if field not in spec]
    if missing and not partial:
        raise Invalid("PUT sets every limit (null: no limit); PATCH changes some",
                      f"spec.{missing[0]}")
    return spec


def expected_version(request, metadata: dict):
    """The resourceVersion a writer based its change on: metadata or If-Match, if any."""
    value = metadata.get("resourceVersion") or request.headers.get("If-Match", "").strip('"')
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise Invalid("resourceVersion must be a number", "metadata.resourceVersion") from None
