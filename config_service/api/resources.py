"""EnMasse-shaped resources: address spaces, addresses, messaging users and plans rendered from
the projections, with the endpoints and connection URLs a space gives its clients."""
import base64
import datetime
from urllib.parse import quote

from django.conf import settings

from core.api.manifests import ADMIN_API, ENMASSE, MAAS_API, USER_API, metadata, timestamp

from .. import brokers, plan_specs, readings, routers, space_connectors, space_endpoints
from ..status import address_status, agents_needed, space_status


def endpoints(space, ca: str | None = None) -> list[dict]:
    """Where clients connect (EnMasse status.endpointStatuses); `ca`: the space's CA
    certificate if the caller has read it already."""
    if space.type == "brokered":
        # Its broker of the pool, through the relays that take the space from the login (and,
        # for AMQP, serve the bare address names); without them, RabbitMQ's own AMQP port.
        broker = brokers.pooled_broker(space.broker)
        amqp = [{"name": "amqp", "port": broker.tenant_amqp_port or broker.amqp_port}]
        if broker.tenant_amqps_port:
            amqp.append({"name": "amqps", "port": broker.tenant_amqps_port})
        mqtt = [{"name": "mqtt", "port": broker.mqtt_port}]
        if broker.mqtts_port:
            mqtt.append({"name": "mqtts", "port": broker.mqtts_port})
        return _with_hosts([
            {"name": "messaging", "serviceHost": settings.MAAS_PUBLIC_HOST, "servicePorts": amqp,
             "virtualHost": f"vhost:{space.vhost}", "username": f"<username>@{space.vhost}"},
            {"name": "mqtt", "serviceHost": settings.MAAS_PUBLIC_HOST, "servicePorts": mqtt,
             "username": f"{space.vhost}:<username>@{space.vhost}"},
        ], space)
    tls = bool(_ca_cert(space) if ca is None else ca)
    ports = [{"name": "amqp", "port": settings.MAAS_ROUTER_AMQP_PORT}]
    if tls:
        ports.append({"name": "amqps", "port": settings.MAAS_ROUTER_AMQPS_PORT})
    # The AMQP open hostname selects the space on the router: qdrouterd's vhost policy and
    # address prefix follow it alone (the embedded router also reads `user@vhost`).
    out = [{"name": "messaging", "serviceHost": settings.MAAS_PUBLIC_HOST, "servicePorts": ports,
            "virtualHost": space.vhost, "username": f"<username>@{space.vhost}"}]
    if routers.meshed():
        # Each router of the mesh, for clients to reconnect through when theirs goes away.
        host = settings.MAAS_PUBLIC_HOST
        out[0]["failoverUrls"] = [url for p in ports
                                  for url in routers.failover_urls(p["name"], host)]
    if settings.MAAS_MQTT_GATEWAY_ENABLED:
        # The MQTT gateway (docs/mqtt.md): the login names the space, MQTTS has the router's
        # certificate (the same CA as AMQPS).
        mqtt = [{"name": "mqtt", "port": settings.MAAS_MQTT_GATEWAY_PORT}]
        if tls:
            mqtt.append({"name": "mqtts", "port": settings.MAAS_MQTT_GATEWAY_TLS_PORT})
        out.append({"name": "mqtt", "serviceHost": settings.MAAS_PUBLIC_HOST,
                    "servicePorts": mqtt, "username": f"<username>@{space.vhost}"})
    return _with_hosts(out, space)


def _with_hosts(statuses: list[dict], space) -> list[dict]:
    """Each protocol's status with the host name of the space's endpoint for it
    (spec.endpoints): `externalHost`, what clients connect to and check the certificate
    against (the listeners pick the space's certificate by it, SNI), and `cert`, its
    provider."""
    by_service = {e["service"]: e for e in space_endpoints.of(space.spec)}
    for status in statuses:
        endpoint = by_service.get(status["name"])
        if endpoint is not None:
            host = endpoint["expose"]["routeHost"]
            status.update(externalHost=host, cert=endpoint["cert"]["provider"])
            if "failoverUrls" in status:  # the same routers, by the endpoint's host name
                status["failoverUrls"] = [_on_host(url, host) for url in status["failoverUrls"]]
    return statuses


def _on_host(url: str, host: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{host}:{rest.rpartition(':')[2]}"


def _ca_cert(space) -> str:
    return readings.get().ca_cert(space)


def connection_url(space, username: str) -> str:
    """A ready-to-paste AMQP URL for a messaging user (the password is theirs to fill in)."""
    endpoint = endpoints(space)[0]
    port = endpoint["servicePorts"][0]["port"]
    login = quote(f"{username}@{space.vhost}", safe="")
    host = endpoint.get("externalHost") or endpoint["serviceHost"]
    return f"amqp://{login}:<password>@{host}:{port}"


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
            host = endpoint.get("externalHost") or endpoint["serviceHost"]
            url = f"{port['name']}://{quote(login, safe='')}@{host}:{port['port']}"
            if space.type == "brokered" and port["name"].startswith("amqp"):
                url += f"?amqp.vhost={quote(endpoint['virtualHost'], safe='')}"
            urls.append(url)
    return urls


def address_space(space, states: dict) -> dict:
    status = space_status(space, states)
    ca = _ca_cert(space)
    return {
        "apiVersion": ENMASSE,
        "kind": "AddressSpace",
        "metadata": metadata(space.name, space.tenant.slug, space.resource_version,
                              space.created_at, uid=str(space.uid)),
        "spec": {**space.spec, "type": space.type, "plan": space.plan,
                 **({"endpoints": space_endpoints.public(space.spec["endpoints"])}
                    if "endpoints" in space.spec else {}),
                 **({"connectors": space_connectors.public(space.spec["connectors"])}
                    if "connectors" in space.spec else {})},
        "status": {
            "phase": status.phase,
            "isReady": status.is_ready,
            "messages": status.messages + space_endpoints.expiry_messages(space.spec),
            "endpointStatuses": endpoints(space, ca),
            "planStatus": space.plan_status,
            **({"caCert": base64.b64encode(ca.encode()).decode()} if ca else {}),
            # Read from the routers now, only for a space that has connectors.
            **({"connectors": readings.get().connectors(space)}
               if space_connectors.of(space.spec) and not space.terminating else {}),
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
        "metadata": metadata(addr.name, space.tenant.slug, addr.resource_version,
                              addr.created_at, addressSpace=space.name),
        "spec": spec,
        "status": body,
    }


def connection(space, c, links: bool = False) -> dict:
    """A client connection (config_service/readings.py) in the shape of EnMasse's console
    Connection: metadata, spec, metrics, and with `links` each of its links."""
    opened = (datetime.datetime.fromtimestamp(c.opened_at, datetime.UTC)
              if c.opened_at is not None else None)
    body = {
        "apiVersion": MAAS_API,
        "kind": "Connection",
        "metadata": {"name": c.id, "namespace": space.tenant.slug, "addressSpace": space.name,
                     "creationTimestamp": timestamp(opened) if opened else None},
        "spec": {"hostname": c.hostname, "containerId": c.container_id,
                 "protocol": c.protocol, "encrypted": c.encrypted, "principal": c.principal,
                 "saslMechanism": c.sasl_mechanism, "via": c.via,
                 "properties": {str(k): v if isinstance(v, (bool, int, float)) else str(v)
                                for k, v in c.properties.items()}},
        "metrics": dict(c.metrics),
    }
    if links:
        body["links"] = [{"name": link.name, "role": link.role, "address": link.address,
                          "metrics": dict(link.metrics)} for link in c.links]
    return body


def messaging_user(space, user, states: dict) -> dict:
    applied = all(
        states.get(kind) is not None and states[kind].applied_sequence >= user.resource_version
        and not states[kind].invalidated
        for kind in agents_needed(space.type)
    )
    return {
        "apiVersion": USER_API,
        "kind": "MessagingUser",
        "metadata": metadata(user.name, space.tenant.slug, user.resource_version,
                              user.created_at, addressSpace=space.name),
        "spec": {"username": user.username, "authentication": {"type": "password"},
                 "authorization": user.authorization},
        "status": {"phase": "Active" if applied else "Configuring",
                   "message": "" if applied else "Waiting for the agents",
                   "connectionUrl": connection_url(space, user.username),
                   "connectionUrls": connection_urls(space, user.username)},
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
