"""The data-plane reads `config_service` asks for (config_service/readings.py), registered at
start-up by workers/apps.py: a space's router and broker counters for the portal's address
table, the CA certificate its status shows, and its connections (workers/connections.py). Each read goes to the space's own router and
broker (`endpoints.of`), with short timeouts: a stats page must not hang on a busy target.
"""
import logging
from urllib.parse import quote

import requests
from django.conf import settings

from config_service.readings import AddressCounters
from workers import certificates, connections, connector_status, endpoints
from workers.agents.router.certificates import ca_cert_pem
from workers.clients.qdr import Management, RouterUnreachable, router_address

logger = logging.getLogger(__name__)

TIMEOUT_SECONDS = 3


class WorkersReadings:
    def address_counters(self, space) -> AddressCounters:
        where = endpoints.of(space)
        router: dict = {}
        for one in where.routers:  # a mesh's counters add up: each counts its own clients
            for name, row in _router_rows(one, space.vhost).items():
                total = router.setdefault(name, dict.fromkeys(row, 0))
                for key, value in row.items():
                    total[key] += value
        broker: dict = {}
        for one in where.brokers:  # each holds the addresses placed on it
            broker.update(_broker_rows(one, space.vhost))
        return AddressCounters(router=router, broker=broker)

    def ca_cert(self, space) -> str:
        # Its endpoints' own CAs (spec.endpoints), and the platform's where a protocol has no
        # endpoint of its own: one bundle a client of either protocol can trust.
        own, covered = certificates.ca_certs(space)
        if covered:
            return "".join(own)
        # The platform's certificate: the router's, the gateway's and the brokered relays'.
        if space.type == "brokered":
            broker = endpoints.of(space).broker
            tls = broker.tenant_amqps_port or broker.mqtts_port
        else:
            tls = settings.MAAS_ROUTER_ENABLED
        return "".join(own) + (ca_cert_pem(settings.MAAS_ROUTER_TLS_CERT) if tls else "")

    def connections(self, space, links: bool = False):
        return connections.connections(space, links)

    def close_connection(self, space, connection_id: str):
        return connections.close(space, connection_id)

    def connectors(self, space) -> list[dict]:
        return connector_status.status(space)


def _router_rows(router: endpoints.RouterEndpoint, vhost: str) -> dict:
    try:
        mgmt = Management(router.management_url, router.admin_user, router.admin_password,
                          timeout=TIMEOUT_SECONDS, ca=router.management_ca)
    except RouterUnreachable:
        return {}
    try:
        rows = mgmt.query("org.apache.qpid.dispatch.router.address")
        links = mgmt.query("org.apache.qpid.dispatch.router.link")
        # Links to brokers (autoLinks, routed links) are not the tenant's senders/receivers.
        internal = {str(c["identity"]) for c in mgmt.query("org.apache.qpid.dispatch.connection")
                    if c.get("role") == "route-container"}
    except Exception:  # a stats page must not fail on a busy router
        logger.warning("portal.router_stats_failed", exc_info=True)
        return {}
    finally:
        mgmt.close()
    out: dict = {}
    prefix = f"{vhost}/"
    mine = [(key, phase, row) for key, phase, row in
            ((*router_address(row), row) for row in rows) if key.startswith(prefix)]
    # A waypoint (queue) has a phase 1, what its receivers get; its phase 0 goes out to the
    # broker. Not containerCount: the counters of a phase with no link outlive its links.
    waypoints = {key for key, phase, _ in mine if phase == 1}
    for key, phase, row in mine:
        s = out.setdefault(key[len(prefix):], {"in": 0, "out": 0, "senders": 0, "receivers": 0})
        if phase == 0:
            s["in"] += int(row.get("deliveriesIngress", 0))
        if phase == 1 or key not in waypoints:
            s["out"] += int(row.get("deliveriesEgress", 0))
    for link in links:
        key = router_address({"owningAddr": link.get("owningAddr")})[0]
        if (str(link.get("connectionId")) in internal
                or link.get("linkType", "endpoint") != "endpoint"):
            continue  # brokers' links and, in a mesh, the links between routers
        if key.startswith(prefix) and key[len(prefix):] in out:
            side = "receivers" if link.get("linkDir") == "out" else "senders"
            out[key[len(prefix):]][side] += 1
    return out


def _broker_rows(broker: endpoints.BrokerEndpoint, vhost: str) -> dict:
    for i, url in enumerate(broker.api_urls):  # a cluster: the first node that answers
        try:
            response = requests.get(
                f"{url}/queues/{quote(vhost, safe='')}",
                params={"columns": "name,messages,consumers,message_stats.publish,"
                                   "message_stats.deliver_get"},
                auth=(broker.api_user, broker.api_password), timeout=TIMEOUT_SECONDS)
            if response.status_code == 404:  # the vhost is not made yet (space Configuring)
                return {}
            response.raise_for_status()
            return {q["name"]: q for q in response.json()}
        except requests.ConnectionError:
            if i < len(broker.api_urls) - 1:
                continue
            logger.warning("portal.broker_stats_failed", exc_info=True)
        except Exception:
            logger.warning("portal.broker_stats_failed", exc_info=True)
            break
    return {}
