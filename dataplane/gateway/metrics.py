"""The MQTT gateway's Prometheus figures, served on their own HTTP listener (default
127.0.0.1:8092, `MAAS_MQTT_GATEWAY_METRICS_PORT`; 0 turns it off): what the operator dashboard
and the `MaaSMQTTGatewayDown` alert of deploy/monitoring read."""
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

REGISTRY = CollectorRegistry()
CONNECTIONS = Gauge("maas_mqtt_gateway_connections",
                    "MQTT clients connected (CONNACK accepted, not yet gone)", registry=REGISTRY)
CONNECTS = Counter("maas_mqtt_gateway_connects",
                   "CONNECT packets answered, by CONNACK result", ["result"], registry=REGISTRY)
MESSAGES = Counter("maas_mqtt_gateway_messages",
                   "PUBLISH packets: `in` from MQTT clients to the router, `out` to MQTT clients",
                   ["direction"], registry=REGISTRY)
RESULTS = {0: "accepted", 1: "bad_protocol", 2: "id_rejected", 3: "unavailable",
           4: "bad_login", 5: "not_authorized"}


def connack(code: int) -> None:
    CONNECTS.labels(RESULTS.get(code, str(code))).inc()


def serve(host: str, port: int) -> None:
    """Starts the listener in a thread of its own (prometheus_client's); port 0: none."""
    if port:
        start_http_server(port, host, registry=REGISTRY)
