"""Kubernetes manifests of one standard address space, as pure functions of its data.

EnMasse's standard-space infra (`templates/standard-space-infra.yaml`, AddressProvisioner):
a router StatefulSet, one broker StatefulSet per broker cluster the credits call for (pooled
`broker-<n>` with one replica, sharded `broker-sharded-<crc>` with one per credit), the space's
agent, Services for the endpoints, and certificate Secrets (the internal ones signed by the
platform's internal CA, workers/infra/internal_ca.py, each with that CA's bundle as `ca.crt`).
Every object carries the labels of its space and an owner reference to the space's owner
ConfigMap, so deleting that ConfigMap lets Kubernetes' garbage collector remove the rest.
Nothing here talks to Kubernetes or Django.

One module of 900-odd lines: the objects of a space name, label and mount each other (the
router's Service, its ConfigMap and certificate Secrets, the brokers' StatefulSets, their
headless Services and certificate Secrets), and one place keeps those names consistent.
"""
import base64
import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field

from dataplane import qdrouterd

FIELD_MANAGER = "maas-infra"
PART_OF = "maas"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_INFRA = "maas.io/infra"  # the short id of the space's infra
LABEL_SPACE = "maas.io/space"  # the space uid
LABEL_BROKER = "maas.io/broker"  # a broker's clusterId
ANNOTATION_BROKER_STATE = "maas.io/broker-state"  # Active | Migrating | Draining
ANNOTATION_CONFIG_HASH = "maas.io/config-hash"
# On the pod template of a workload whose processes read the internal CA bundle once (the
# routers, the agent): the hash of that bundle, so a new one rolls them. The controller re-signs
# certificates with a new CA only once every such pod runs with a bundle that holds it
# (controller.py, "trust first").
ANNOTATION_TRUST = "maas.io/trust"
# On a certificate Secret the internal CA signed: the controller's, or internal_ca.py's
LABEL_ISSUER = "maas.io/issuer"
INTERNAL_CA_NAME = "maas-internal-ca"
ANNOTATION_TENANT = "maas.io/tenant"
ANNOTATION_SPACE_NAME = "maas.io/address-space"

# Every listener but the tenants' amqp requires TLS: amqps with the tenant's certificate, the
# others with the router's internal one (management, the MQTT gateway's) or the mesh's.
ROUTER_AMQP_PORT = 5672
ROUTER_AMQPS_PORT = 5671
ROUTER_INTERNAL_PORT = 5673  # the MQTT gateway's: tenants' logins, internal certificate
ROUTER_MANAGEMENT_PORT = 5675
ROUTER_INTER_ROUTER_PORT = 55672
ROUTER_HTTP_PORT = 8080
# The brokers listen with TLS only (their own certificate of the internal CA): AMQP 0-9-1 and
# 1.0 on 5671, the management API over HTTPS on 15671.
BROKER_AMQPS_PORT = 5671
BROKER_MANAGEMENT_PORT = 15671
BROKER_DIST_PORTS = (4369, 25672)  # epmd, Erlang distribution (clustered brokers): plain
BROKER_ADMIN_USER = "maas-admin"
# The MaaS auth service of the control plane (deploy/base/authservice.yaml): every space's
# router relays its clients' SASL there.
AUTH_SERVICE_NAME = "maas-authservice"
AUTH_SERVICE_PORT = 5676
# Where the router container finds its configuration and certificates (volumes below).
ROUTER_CONFIG_DIR = "/etc/maas-router"
ROUTER_CERTS_DIR = "/etc/maas-router-certs"  # the tenants' AMQPS certificate
# The router's internal certificate (management, the gateway's listener), the internal CA
# bundle (`ca.crt`: the brokers' and the mesh's) and the auth service's CA
ROUTER_INTERNAL_DIR = "/etc/maas-router-internal"
CA_FILE = "ca.crt"  # in every internal certificate Secret: the internal CA bundle
AUTH_CA_FILE = "auth-ca.crt"  # in the router's internal Secret: what certifies the auth service
# The space's mesh identity: a certificate of the internal CA for `*.<router>-internal...` that
# every replica presents to the others (mesh_secret_name).
ROUTER_MESH_DIR = "/etc/maas-router-mesh"
ROUTER_CONFIG_FILE = "qdrouterd.json"
BROKER_TLS_DIR = "/etc/maas-broker-tls"
# In the agent's pod: the internal CA bundle as `ca.pem`, where MAAS_INTERNAL_TLS_DIR points
# (config_service.brokers.internal_ca): what its clients check routers and brokers against.
AGENT_CA_DIR = "/etc/maas/internal-ca"
_EPSILON = 1e-9

# Kinds the controller owns per space (the owner ConfigMap excluded), for pruning.
OWNED_KINDS = (
    ("v1", "ConfigMap"), ("v1", "Secret"), ("v1", "Service"), ("apps/v1", "StatefulSet"),
    ("apps/v1", "Deployment"), ("policy/v1", "PodDisruptionBudget"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
)


@dataclass(frozen=True)
class InfraSettings:
    """Images, namespace and sizes (settings MAAS_INFRA_*, MAAS_*_IMAGE)."""

    namespace: str = "maas"
    # Qpid Dispatch Router 1.x (docs/deploy.md: why not skupper-router, and how sure the tag is)
    router_image: str = "quay.io/interconnectedcloud/qdrouterd:1.17.1"
    # RabbitMQ with the x-maas-topic exchange type: deploy/rabbitmq/Dockerfile
    broker_image: str = "ghcr.io/maas-project/maas-rabbitmq:0.1.0"
    control_plane_image: str = "ghcr.io/maas-project/maas:0.1.0"
    router_resources: dict = field(default_factory=lambda: {
        "requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}})
    broker_resources: dict = field(default_factory=lambda: {
        "requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}})
    agent_resources: dict = field(default_factory=lambda: {
        "requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}})
    broker_storage: str = "2Gi"
    storage_class: str = ""
    router_service_type: str = "ClusterIP"  # LoadBalancer to expose the endpoints
    config_map: str = "maas-config"  # the control plane's environment (envFrom)
    secret: str = "maas-secrets"  # the control plane's secrets, read through *_FILE variables
    secret_mount: str = "/etc/maas/secrets"
    control_plane_selector: dict = field(default_factory=lambda: {LABEL_PART_OF: PART_OF,
                                                                  LABEL_COMPONENT: "worker"})
    # The MQTT gateway's pods (deploy/base/mqtt-gateway.yaml): they reach ROUTER_INTERNAL_PORT
    gateway_selector: dict = field(default_factory=lambda: {LABEL_PART_OF: PART_OF,
                                                            LABEL_NAME: "maas-mqtt-gateway"})
    # The routers' SASL goes to the auth service: its Service in `namespace` unless set.
    auth_service_host: str = ""
    auth_service_port: int = AUTH_SERVICE_PORT
    # PEM of the CA that certifies the auth service where that is not the internal CA
    # (MAAS_INFRA_AUTH_SERVICE_CA: an auth service elsewhere); "": the controller's choice
    # (internal_ca.auth_service_ca). The routers relay SASL to it over TLS either way.
    auth_service_ca: str = ""
    router_admin_user: str = "admin"  # the management listener's only user (MAAS_ROUTER_ADMIN_USER)

    @property
    def auth_service(self) -> tuple[str, int]:
        return (self.auth_service_host or service_host(AUTH_SERVICE_NAME, self),
                self.auth_service_port)


@dataclass(frozen=True)
class Broker:
    cluster_id: str
    replicas: int = 1
    state: str = "Active"  # Active, or Migrating / Draining while being removed


# spec.endpoints[].expose.type -> the router Service's type (a `route` keeps the platform's,
# MAAS_ROUTER_SERVICE_TYPE: no OpenShift Route or Ingress is made)
SERVICE_TYPES = {"loadbalancer": "LoadBalancer", "nodeport": "NodePort"}


@dataclass(frozen=True)
class SpaceInfra:
    """What one standard space needs: derived from its plan and its scheduled addresses."""

    uid: str
    tenant: str
    name: str
    plan: str
    router_replicas: int
    brokers: tuple[Broker, ...]
    # What the plan's infra config changes of InfraSettings (router_resources,
    # broker_resources, broker_storage, storage_class): `sized_settings`
    sizes: dict = field(default_factory=dict)
    # The certificate of its `messaging` endpoint (spec.endpoints), for the router's AMQPS;
    # None: a self-signed one for the router's Service names
    tls: "Certificate | None" = None

    @property
    def infra(self) -> str:
        return infra_id(self.uid)

    @property
    def vhost(self) -> str:
        return f"{self.tenant}.{self.name}"


@dataclass(frozen=True)
class Certificate:
    cert_pem: str
    key_pem: str


@dataclass(frozen=True)
class Certificates:
    """What a space's pods present and trust: the tenants' AMQPS certificate (`tls`), and the
    internal CA's for the routers' mesh, their internal listeners and each broker (by
    clusterId); `trust` the internal CA bundle, `auth_ca` what certifies the auth service."""

    tls: Certificate
    mesh: Certificate
    internal: Certificate
    brokers: dict = field(default_factory=dict)  # clusterId -> Certificate
    trust: str = ""
    auth_ca: str = ""

    def broker(self, cluster_id: str) -> Certificate:
        return self.brokers[cluster_id]


def infra_id(uid: str) -> str:
    """EnMasse's infraUuid: short enough for every object name derived from it."""
    return str(uid).replace("-", "")[:12]


def space_infra(uid, tenant: str, name: str, plan: str, addresses,
                min_router_replicas: int = 1, sizes: dict | None = None,
                min_broker_replicas: int = 1) -> SpaceInfra:
    """SpaceInfra from scheduled addresses given as (type, plan_status, placement) tuples.

    Router replicas = max(ceil(sum of router credits), minReplicas) (EnMasse); one broker
    StatefulSet per distinct clusterId, a sharded topic's with one replica per credit, each
    with at least `min_broker_replicas` nodes (a cluster from 2 on: workers/endpoints.py).
    """
    router, replicas = 0.0, {}
    for address_type, plan_status, placement in addresses:
        resources = (plan_status or {}).get("resources") or {}
        router += float(resources.get("router", 0) or 0)
        broker = float(resources.get("broker", 0) or 0)
        for p in placement or ():
            cluster = p["clusterId"]
            count = 1
            if cluster.startswith("broker-sharded-") and address_type == "topic":
                count = max(math.ceil(broker - _EPSILON), 1)
            replicas[cluster] = max(replicas.get(cluster, min_broker_replicas), count)
    brokers = tuple(Broker(c, replicas[c]) for c in sorted(replicas, key=_broker_order))
    return SpaceInfra(uid=str(uid), tenant=tenant, name=name, plan=plan,
                      router_replicas=max(math.ceil(router - _EPSILON), min_router_replicas, 1),
                      brokers=brokers, sizes=dict(sizes or {}))


def sized_settings(config: dict, cfg: InfraSettings) -> dict:
    """What an infra config (config_service/infra_configs.py) changes of `cfg`: the router's
    and brokers' memory and CPU (request and limit of memory alike, as EnMasse set them), the
    brokers' storage and storage class."""
    sizes = {}
    for part in ("router", "broker"):
        wanted = (config.get(part) or {}).get("resources") or {}
        if "memory" in wanted or "cpu" in wanted:
            current = getattr(cfg, f"{part}_resources")
            requests = {**current.get("requests", {})}
            limits = {**current.get("limits", {})}
            if "memory" in wanted:
                requests["memory"] = limits["memory"] = wanted["memory"]
            if "cpu" in wanted:
                requests["cpu"] = wanted["cpu"]
            sizes[f"{part}_resources"] = {"requests": requests, "limits": limits}
    broker = config.get("broker") or {}
    if (broker.get("resources") or {}).get("storage"):
        sizes["broker_storage"] = broker["resources"]["storage"]
    if broker.get("storageClassName"):
        sizes["storage_class"] = broker["storageClassName"]
    return sizes


def _broker_order(cluster: str):
    head, _, tail = cluster.rpartition("-")
    return (head, int(tail)) if tail.isdigit() else (cluster, -1)


# Names ---------------------------------------------------------------------------------------

def owner_name(infra: str) -> str:
    return f"space-{infra}"


def router_name(infra: str) -> str:
    return f"router-{infra}"


def agent_name(infra: str) -> str:
    return f"agent-{infra}"


def broker_name(infra: str, cluster_id: str) -> str:
    return f"{cluster_id}-{infra}"


def tls_secret_name(infra: str) -> str:
    return f"router-{infra}-tls"


def mesh_secret_name(infra: str) -> str:
    return f"{router_name(infra)}-mesh"


def internal_secret_name(infra: str) -> str:
    return f"{router_name(infra)}-internal-tls"


def broker_tls_secret_name(infra: str, cluster_id: str) -> str:
    return f"{broker_name(infra, cluster_id)}-tls"


def router_pod_hosts(space: "SpaceInfra", cfg: "InfraSettings") -> list[str]:
    """The DNS names of the space's router replicas: the StatefulSet's pods under its
    headless `-internal` Service."""
    name = router_name(space.infra)
    return [f"{name}-{i}.{service_host(f'{name}-internal', cfg)}"
            for i in range(space.router_replicas)]


def mesh_hosts(infra: str, cfg: "InfraSettings") -> list[str]:
    """What the mesh certificate names: any replica of the space's routers."""
    internal = service_host(f"{router_name(infra)}-internal", cfg)
    return [f"*.{internal}", f"*.{internal}.cluster.local"]


def internal_hosts(infra: str, cfg: "InfraSettings") -> list[str]:
    """What the router's internal certificate names: each replica (the agent manages them one
    by one) and the headless Service (the MQTT gateway's way in)."""
    internal = service_host(f"{router_name(infra)}-internal", cfg)
    return [internal, f"{internal}.cluster.local", *mesh_hosts(infra, cfg)]


def broker_hosts(infra: str, cluster_id: str, cfg: "InfraSettings") -> list[str]:
    """What a broker's certificate names: its headless Service (the routers' connectors and
    the agent's API client) and each of its pods (cluster nodes, a drain's shovels)."""
    host = service_host(broker_name(infra, cluster_id), cfg)
    return [host, f"*.{host}", f"{host}.cluster.local", f"*.{host}.cluster.local"]


def broker_api_url(host: str) -> str:
    """A broker's management API: HTTPS only."""
    return f"https://{host}:{BROKER_MANAGEMENT_PORT}/api"


def broker_secret_name(infra: str) -> str:
    return f"broker-{infra}-admin"


def service_host(name: str, cfg: InfraSettings) -> str:
    return f"{name}.{cfg.namespace}.svc"


# Building blocks -----------------------------------------------------------------------------

def labels(space: SpaceInfra, component: str, **extra) -> dict:
    return {
        LABEL_NAME: f"maas-{component}",
        LABEL_COMPONENT: component,
        LABEL_PART_OF: PART_OF,
        LABEL_MANAGED_BY: FIELD_MANAGER,
        LABEL_INFRA: space.infra,
        LABEL_SPACE: space.uid,
        **extra,
    }


def selector(space: SpaceInfra, component: str, **extra) -> dict:
    return {LABEL_COMPONENT: component, LABEL_INFRA: space.infra, **extra}


def owner_reference(space: SpaceInfra, owner_uid: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": owner_name(space.infra),
            "uid": owner_uid, "controller": True, "blockOwnerDeletion": True}


def _metadata(space, cfg, name, component, owner_uid, annotations=None, **extra_labels) -> dict:
    meta = {"name": name, "namespace": cfg.namespace,
            "labels": labels(space, component, **extra_labels),
            "ownerReferences": [owner_reference(space, owner_uid)]}
    if annotations:
        meta["annotations"] = annotations
    return meta


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def config_hash(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def _security_context() -> dict:
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _pod_security(user: int) -> dict:
    return {"runAsNonRoot": True, "runAsUser": user, "runAsGroup": user, "fsGroup": user,
            "seccompProfile": {"type": "RuntimeDefault"}}


# The owner -----------------------------------------------------------------------------------

def owner_manifest(space: SpaceInfra, cfg: InfraSettings) -> dict:
    """The space's owner object: deleting it garbage-collects everything else of the space."""
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": owner_name(space.infra), "namespace": cfg.namespace,
                     "labels": labels(space, "space"),
                     "annotations": {ANNOTATION_TENANT: space.tenant,
                                     ANNOTATION_SPACE_NAME: space.name}},
        "data": {"uid": space.uid, "tenant": space.tenant, "name": space.name,
                 "plan": space.plan, "vhost": space.vhost},
    }


# Router --------------------------------------------------------------------------------------

def router_listeners(space: SpaceInfra, cfg: InfraSettings) -> qdrouterd.Listeners:
    """Where a space's qdrouterd listens: every port on all interfaces (the NetworkPolicy says
    who may reach which), interior mode for the replicas' mesh, the space's vhost as the tenant
    listeners' policy vhost (clients need not send it as their AMQP hostname), SASL relayed to
    the control plane's auth service over TLS. Every listener but the tenants' amqp requires
    TLS: management and the MQTT gateway's listener with the router's internal certificate,
    the mesh with its own; the brokers and the auth service are checked against the internal
    CA bundle (or the auth service's own CA)."""
    auth_host, auth_port = cfg.auth_service
    internal = ROUTER_INTERNAL_DIR
    return qdrouterd.Listeners(
        host="0.0.0.0", amqp_port=ROUTER_AMQP_PORT,
        management_host="0.0.0.0", management_port=ROUTER_MANAGEMENT_PORT,
        admin_user=cfg.router_admin_user, auth_host=auth_host, auth_port=auth_port,
        amqps_port=ROUTER_AMQPS_PORT, tls_cert=f"{ROUTER_CERTS_DIR}/tls.crt",
        tls_key=f"{ROUTER_CERTS_DIR}/tls.key",
        metrics_host="0.0.0.0", metrics_port=ROUTER_HTTP_PORT,
        mode="interior", inter_router_port=ROUTER_INTER_ROUTER_PORT,
        # Mutual TLS between the replicas, each presenting the space's mesh certificate and
        # trusting the internal CA; the connectors are the router agent's
        # (workers/agents/router/desired.py, mesh_connectors), which check the peer's name.
        mesh_tls=qdrouterd.TlsFiles(f"{ROUTER_MESH_DIR}/{CA_FILE}", f"{ROUTER_MESH_DIR}/tls.crt",
                                    f"{ROUTER_MESH_DIR}/tls.key"),
        tenant_vhost=space.vhost, worker_threads=2,
        auth_ca=f"{internal}/{AUTH_CA_FILE}", management_tls=True,
        internal_tls=qdrouterd.TlsFiles(f"{internal}/{CA_FILE}", f"{internal}/tls.crt",
                                        f"{internal}/tls.key"),
        internal_port=ROUTER_INTERNAL_PORT, broker_ca=f"{internal}/{CA_FILE}")


def router_config(space: SpaceInfra, cfg: InfraSettings) -> list:
    """The qdrouterd configuration of the space's router pods (dataplane/qdrouterd.py): the
    listeners, the auth service plugin and the management policy; the agent adds the rest over
    management. The image expands `${HOSTNAME}` (the pod name) into a unique router id."""
    return qdrouterd.router_config("${HOSTNAME}", router_listeners(space, cfg))


def _issued_secret(meta: dict, cert: Certificate, trust: str, **more: str) -> dict:
    """A certificate Secret of the internal CA: the pair, the CA bundle as `ca.crt`, labelled
    with its issuer (what `rotate_secrets --internal-ca-finish` checks)."""
    meta["labels"][LABEL_ISSUER] = INTERNAL_CA_NAME
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": meta,
            "data": {"tls.crt": _b64(cert.cert_pem), "tls.key": _b64(cert.key_pem),
                     CA_FILE: _b64(trust), **{k: _b64(v) for k, v in more.items()}}}


def trust_hash(trust: str) -> str:
    return config_hash(trust)


def router_manifests(space: SpaceInfra, cfg: InfraSettings, owner_uid: str,
                     certs: Certificates) -> list[dict]:
    """`certs.tls`: the clients' AMQPS certificate; `certs.mesh`: the replicas' certificate for
    each other (mesh_hosts); `certs.internal`: management's and the MQTT gateway's listener's
    (internal_hosts)."""
    infra, name = space.infra, router_name(space.infra)
    tls = certs.tls
    config = json.dumps(router_config(space, cfg), indent=2, sort_keys=True)
    tls_name = tls_secret_name(infra)
    meta = lambda n, **kw: _metadata(space, cfg, n, "router", owner_uid, **kw)  # noqa: E731
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(f"{name}-config"),
                  "data": {ROUTER_CONFIG_FILE: config}}
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
              "metadata": meta(tls_name),
              "data": {"tls.crt": _b64(tls.cert_pem), "tls.key": _b64(tls.key_pem),
                       "ca.crt": _b64(tls.cert_pem)}}
    mesh_secret = _issued_secret(meta(mesh_secret_name(infra)), certs.mesh, certs.trust)
    internal_secret = _issued_secret(meta(internal_secret_name(infra)), certs.internal,
                                     certs.trust, **{AUTH_CA_FILE: certs.auth_ca})
    ports = [
        {"name": "amqp", "port": ROUTER_AMQP_PORT, "targetPort": "amqp", "protocol": "TCP"},
        {"name": "amqps", "port": ROUTER_AMQPS_PORT, "targetPort": "amqps", "protocol": "TCP"},
    ]
    service = {"apiVersion": "v1", "kind": "Service", "metadata": meta(name),
               "spec": {"type": cfg.router_service_type, "selector": selector(space, "router"),
                        "ports": ports}}
    internal = {"apiVersion": "v1", "kind": "Service", "metadata": meta(f"{name}-internal"),
                "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                         "selector": selector(space, "router"),
                         "ports": [
                             {"name": "internal", "port": ROUTER_INTERNAL_PORT,
                              "targetPort": "internal", "protocol": "TCP"},
                             {"name": "management", "port": ROUTER_MANAGEMENT_PORT,
                              "targetPort": "management", "protocol": "TCP"},
                             {"name": "inter-router", "port": ROUTER_INTER_ROUTER_PORT,
                              "targetPort": "inter-router", "protocol": "TCP"},
                             {"name": "http", "port": ROUTER_HTTP_PORT, "targetPort": "http",
                              "protocol": "TCP"}]}}
    container = {
        "name": "router",
        "image": cfg.router_image,
        # The image's launch script copies QDROUTERD_CONF to /tmp/qdrouterd.<TYPE>, expands
        # environment variables in it and runs qdrouterd on it.
        "env": [{"name": "QDROUTERD_CONF", "value": f"{ROUTER_CONFIG_DIR}/{ROUTER_CONFIG_FILE}"},
                {"name": "QDROUTERD_CONF_TYPE", "value": "json"}],
        "ports": [
            {"name": "amqp", "containerPort": ROUTER_AMQP_PORT, "protocol": "TCP"},
            {"name": "amqps", "containerPort": ROUTER_AMQPS_PORT, "protocol": "TCP"},
            {"name": "internal", "containerPort": ROUTER_INTERNAL_PORT, "protocol": "TCP"},
            {"name": "management", "containerPort": ROUTER_MANAGEMENT_PORT, "protocol": "TCP"},
            {"name": "inter-router", "containerPort": ROUTER_INTER_ROUTER_PORT,
             "protocol": "TCP"},
            {"name": "http", "containerPort": ROUTER_HTTP_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"},
                           "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"},
                          "initialDelaySeconds": 30, "periodSeconds": 10},
        "resources": cfg.router_resources,
        "securityContext": {**_security_context(), "readOnlyRootFilesystem": True},
        "volumeMounts": [
            {"name": "config", "mountPath": ROUTER_CONFIG_DIR, "readOnly": True},
            {"name": "certs", "mountPath": ROUTER_CERTS_DIR, "readOnly": True},
            {"name": "internal", "mountPath": ROUTER_INTERNAL_DIR, "readOnly": True},
            {"name": "mesh", "mountPath": ROUTER_MESH_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    statefulset = {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta(name),
        "spec": {
            "replicas": space.router_replicas,
            "serviceName": f"{name}-internal",
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector(space, "router")},
            "template": {
                "metadata": {"labels": labels(space, "router"),
                             "annotations": {ANNOTATION_CONFIG_HASH: config_hash(
                                 config, tls.cert_pem, certs.mesh.cert_pem,
                                 certs.internal.cert_pem, certs.auth_ca),
                                 ANNOTATION_TRUST: trust_hash(certs.trust)}},
                "spec": {
                    "automountServiceAccountToken": False,
                    "securityContext": _pod_security(10000),
                    "containers": [container],
                    "volumes": [
                        {"name": "config", "configMap": {"name": f"{name}-config"}},
                        {"name": "certs", "secret": {"secretName": tls_name}},
                        {"name": "internal",
                         "secret": {"secretName": internal_secret_name(infra)}},
                        {"name": "mesh", "secret": {"secretName": mesh_secret_name(infra)}},
                        {"name": "tmp", "emptyDir": {}},
                    ],
                    "affinity": _spread(space, "router"),
                },
            },
        },
    }
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta(name),
           "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector(space, "router")}}}
    return [config_map, secret, mesh_secret, internal_secret, service, internal, statefulset,
            pdb]


def _spread(space: SpaceInfra, component: str, **extra) -> dict:
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 100,
        "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": selector(space, component,
                                                                      **extra)}}}]}}


# Brokers -------------------------------------------------------------------------------------

def broker_tls_config() -> list[str]:
    """RabbitMQ's listeners: TLS only, with the broker's certificate of the internal CA (TLS
    1.2 and 1.3). Clients show no certificate (`verify_none`): each logs in with a password,
    which TLS now keeps off the pod network. No plain AMQP, MQTT or HTTP listener; the
    Prometheus endpoint (no login) on the pod's loopback only."""
    files = {"cacertfile": f"{BROKER_TLS_DIR}/{CA_FILE}",
             "certfile": f"{BROKER_TLS_DIR}/tls.crt", "keyfile": f"{BROKER_TLS_DIR}/tls.key"}
    lines = ["listeners.tcp = none", f"listeners.ssl.default = {BROKER_AMQPS_PORT}"]
    lines += [f"ssl_options.{k} = {v}" for k, v in files.items()]
    lines += ["ssl_options.verify = verify_none", "ssl_options.fail_if_no_peer_cert = false",
              "ssl_options.versions.1 = tlsv1.3", "ssl_options.versions.2 = tlsv1.2",
              f"management.ssl.port = {BROKER_MANAGEMENT_PORT}"]
    lines += [f"management.ssl.{k} = {v}" for k, v in files.items()]
    lines += ["management.ssl.versions.1 = tlsv1.3", "management.ssl.versions.2 = tlsv1.2",
              "mqtt.listeners.tcp = none", "prometheus.tcp.ip = 127.0.0.1"]
    return lines


def broker_config(space: SpaceInfra, cfg: InfraSettings, broker: Broker) -> dict:
    name = broker_name(space.infra, broker.cluster_id)
    lines = [
        "loopback_users = none",
        *broker_tls_config(),
        "vm_memory_high_watermark.relative = 0.6",
        "disk_free_limit.absolute = 256MB",
        # qdrouterd's connectors cannot send RabbitMQ's `vhost:NAME` open hostname (they send
        # the broker's host name, which selects this default): these brokers serve one space.
        f"amqp1_0.default_vhost = {space.vhost}",
        "cluster_formation.peer_discovery_backend = classic_config",
    ]
    for i in range(broker.replicas):
        lines.append(f"cluster_formation.classic_config.nodes.{i + 1} = "
                     f"rabbit@{name}-{i}.{name}.{cfg.namespace}.svc.cluster.local")
    return {
        "rabbitmq.conf": "\n".join(lines) + "\n",
        "enabled_plugins": "[rabbitmq_management,rabbitmq_amqp1_0,rabbitmq_mqtt,"
                           "rabbitmq_prometheus,rabbitmq_shovel,rabbitmq_shovel_management,"
                           "rabbitmq_maas_topic].\n",
    }


def broker_manifests(space: SpaceInfra, cfg: InfraSettings, owner_uid: str,
                     broker: Broker, certs: Certificates) -> list[dict]:
    """A broker's StatefulSet, headless Service, configuration and certificate Secret
    (`certs.broker(clusterId)`, for broker_hosts)."""
    name = broker_name(space.infra, broker.cluster_id)
    extra = {LABEL_BROKER: broker.cluster_id}
    data = broker_config(space, cfg, broker)
    cert = certs.broker(broker.cluster_id)
    meta = lambda n, **kw: _metadata(space, cfg, n, "broker", owner_uid, **extra,  # noqa: E731
                                     **kw)
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(f"{name}-config"),
                  "data": data}
    tls_secret = _issued_secret(meta(broker_tls_secret_name(space.infra, broker.cluster_id)),
                                cert, certs.trust)
    service = {"apiVersion": "v1", "kind": "Service", "metadata": meta(name),
               "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                        "selector": selector(space, "broker", **extra),
                        "ports": [
                            {"name": "amqps", "port": BROKER_AMQPS_PORT, "targetPort": "amqps",
                             "protocol": "TCP"},
                            {"name": "management", "port": BROKER_MANAGEMENT_PORT,
                             "targetPort": "management", "protocol": "TCP"},
                            {"name": "epmd", "port": 4369, "targetPort": 4369,
                             "protocol": "TCP"},
                            {"name": "dist", "port": 25672, "targetPort": 25672,
                             "protocol": "TCP"}]}}
    secret = broker_secret_name(space.infra)
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "RABBITMQ_USE_LONGNAME", "value": "true"},
        {"name": "RABBITMQ_NODENAME",
         "value": f"rabbit@$(POD_NAME).{name}.{cfg.namespace}.svc.cluster.local"},
        {"name": "RABBITMQ_DEFAULT_USER",
         "valueFrom": {"secretKeyRef": {"name": secret, "key": "username"}}},
        {"name": "RABBITMQ_DEFAULT_PASS",
         "valueFrom": {"secretKeyRef": {"name": secret, "key": "password"}}},
        {"name": "RABBITMQ_CONFIG_FILE", "value": "/etc/maas-broker/rabbitmq.conf"},
        {"name": "RABBITMQ_ENABLED_PLUGINS_FILE", "value": "/etc/maas-broker/enabled_plugins"},
    ]
    container = {
        "name": "broker",
        "image": cfg.broker_image,
        "env": env,
        "ports": [
            {"name": "amqps", "containerPort": BROKER_AMQPS_PORT, "protocol": "TCP"},
            {"name": "management", "containerPort": BROKER_MANAGEMENT_PORT, "protocol": "TCP"},
            {"name": "epmd", "containerPort": 4369, "protocol": "TCP"},
            {"name": "dist", "containerPort": 25672, "protocol": "TCP"},
        ],
        "readinessProbe": {"exec": {"command": ["rabbitmq-diagnostics", "-q",
                                                "check_port_connectivity"]},
                           "initialDelaySeconds": 10, "periodSeconds": 10,
                           "timeoutSeconds": 10},
        "livenessProbe": {"exec": {"command": ["rabbitmq-diagnostics", "-q", "ping"]},
                          "initialDelaySeconds": 60, "periodSeconds": 30, "timeoutSeconds": 15},
        "resources": cfg.broker_resources,
        "securityContext": _security_context(),
        "volumeMounts": [
            {"name": "data", "mountPath": "/var/lib/rabbitmq"},
            {"name": "config", "mountPath": "/etc/maas-broker", "readOnly": True},
            {"name": "tls", "mountPath": BROKER_TLS_DIR, "readOnly": True},
        ],
    }
    # The Erlang cookie as a file (the image refuses RABBITMQ_ERLANG_COOKIE), which the
    # clustered nodes and the CLI tools of the probes read.
    cookie = {
        "name": "erlang-cookie",
        "image": cfg.broker_image,
        "command": ["sh", "-c", "cp /etc/maas-broker-secret/erlang-cookie "
                    "/var/lib/rabbitmq/.erlang.cookie && chmod 600 "
                    "/var/lib/rabbitmq/.erlang.cookie"],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                      "limits": {"memory": "64Mi"}},
        "securityContext": _security_context(),
        "volumeMounts": [
            {"name": "data", "mountPath": "/var/lib/rabbitmq"},
            {"name": "secret", "mountPath": "/etc/maas-broker-secret", "readOnly": True},
        ],
    }
    claim_spec = {"accessModes": ["ReadWriteOnce"],
                  "resources": {"requests": {"storage": cfg.broker_storage}}}
    if cfg.storage_class:
        claim_spec["storageClassName"] = cfg.storage_class
    statefulset = {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": meta(name, annotations={ANNOTATION_BROKER_STATE: broker.state}),
        "spec": {
            "replicas": broker.replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector(space, "broker", **extra)},
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete",
                                                     "whenScaled": "Retain"},
            "template": {
                # A new bundle does not restart a broker: it checks no client's certificate,
                # and Erlang's ssl reads a changed CA file again for its shovels' links.
                "metadata": {"labels": labels(space, "broker", **extra),
                             "annotations": {ANNOTATION_CONFIG_HASH: config_hash(
                                 data, cert.cert_pem)}},
                "spec": {
                    "automountServiceAccountToken": False,
                    "securityContext": _pod_security(999),
                    "terminationGracePeriodSeconds": 60,
                    "initContainers": [cookie],
                    "containers": [container],
                    "volumes": [
                        {"name": "config", "configMap": {"name": f"{name}-config"}},
                        {"name": "secret", "secret": {"secretName": secret,
                                                      "items": [{"key": "erlang-cookie",
                                                                 "path": "erlang-cookie"}]}},
                        # group-readable: RabbitMQ runs as the pod's fsGroup, 999
                        {"name": "tls", "secret": {
                            "secretName": broker_tls_secret_name(space.infra, broker.cluster_id),
                            "defaultMode": 0o440}},
                    ],
                    "affinity": _spread(space, "broker"),
                },
            },
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": claim_spec}],
        },
    }
    if broker.replicas < 2:
        return [config_map, tls_secret, service, statefulset]
    # A cluster: its quorum queues keep a majority through a voluntary disruption (a node
    # drained for an upgrade) only when one node at a time goes.
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta(name),
           "spec": {"maxUnavailable": 1,
                    "selector": {"matchLabels": selector(space, "broker", **extra)}}}
    return [config_map, tls_secret, service, statefulset, pdb]


def broker_secret(space: SpaceInfra, cfg: InfraSettings, owner_uid: str, password: str,
                  cookie: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": _metadata(space, cfg, broker_secret_name(space.infra), "broker",
                                  owner_uid),
            "data": {"username": _b64(BROKER_ADMIN_USER), "password": _b64(password),
                     "erlang-cookie": _b64(cookie)}}


# Agent ---------------------------------------------------------------------------------------

def agent_manifest(space: SpaceInfra, cfg: InfraSettings, owner_uid: str,
                   trust: str = "") -> dict:
    """The space's agent: the storage and router agents in `run_agent`, woken through Redis.
    Its clients check the routers and brokers against the internal CA bundle `trust` (its pod
    restarts when that changes: a process keeps the trust it read)."""
    infra = space.infra
    active = [b for b in space.brokers if b.state == "Active"] or list(space.brokers)
    broker_host = (service_host(broker_name(infra, active[0].cluster_id), cfg)
                   if active else "")
    router_internal = service_host(f"{router_name(infra)}-internal", cfg)
    broker_mount = "/etc/maas/broker"
    env = [
        {"name": "MAAS_AGENT_MODE", "value": "process"},
        {"name": "MAAS_INFRA_BACKEND", "value": "kubernetes"},
        {"name": "MAAS_ROUTER_MANAGEMENT_URL",
         "value": f"amqps://{router_internal}:{ROUTER_MANAGEMENT_PORT}"},
        {"name": "MAAS_INTERNAL_TLS_DIR", "value": AGENT_CA_DIR},
        # The management listener takes the router admin only, checked by the auth service:
        # MAAS_ROUTER_ADMIN_USER and its password file come from the control plane's config.
        {"name": "MAAS_ROUTER_ADMIN_USER", "value": cfg.router_admin_user},
        {"name": "MAAS_ROUTER_HOST", "value": service_host(router_name(infra), cfg)},
        {"name": "MAAS_ROUTER_AMQP_PORT", "value": str(ROUTER_AMQP_PORT)},
        {"name": "MAAS_ROUTER_AMQPS_PORT", "value": str(ROUTER_AMQPS_PORT)},
        {"name": "RABBITMQ_API_URL", "value": broker_api_url(broker_host) if broker_host else ""},
        {"name": "RABBITMQ_AMQP_HOST", "value": broker_host},
        # the brokers' one AMQP listener is TLS
        {"name": "RABBITMQ_AMQP_PORT", "value": str(BROKER_AMQPS_PORT)},
        {"name": "RABBITMQ_AMQPS_PORT", "value": str(BROKER_AMQPS_PORT)},
        {"name": "RABBITMQ_API_USER_FILE", "value": f"{broker_mount}/username"},
        {"name": "RABBITMQ_API_PASSWORD_FILE", "value": f"{broker_mount}/password"},
    ]
    container = {
        "name": "agent",
        "image": cfg.control_plane_image,
        "command": ["python", "manage.py", "run_agent", "--space", space.uid,
                    "--kind", "storage", "--kind", "router"],
        "envFrom": [{"configMapRef": {"name": cfg.config_map}}],
        "env": env,
        "resources": cfg.agent_resources,
        "securityContext": {**_security_context(), "readOnlyRootFilesystem": True},
        "volumeMounts": [
            {"name": "secrets", "mountPath": cfg.secret_mount, "readOnly": True},
            {"name": "broker", "mountPath": broker_mount, "readOnly": True},
            {"name": "internal-ca", "mountPath": AGENT_CA_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": _metadata(space, cfg, agent_name(infra), "agent", owner_uid),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # one agent per space at a time
            "selector": {"matchLabels": selector(space, "agent")},
            "template": {
                "metadata": {"labels": labels(space, "agent"),
                             "annotations": {ANNOTATION_TRUST: trust_hash(trust)}},
                "spec": {
                    "automountServiceAccountToken": False,
                    "securityContext": _pod_security(10001),
                    "containers": [container],
                    "volumes": [
                        {"name": "secrets", "secret": {"secretName": cfg.secret}},
                        {"name": "broker",
                         "secret": {"secretName": broker_secret_name(infra)}},
                        # the bundle only, from the router's internal Secret
                        {"name": "internal-ca", "secret": {
                            "secretName": internal_secret_name(infra),
                            "items": [{"key": CA_FILE, "path": "ca.pem"}]}},
                        {"name": "tmp", "emptyDir": {}},
                    ],
                },
            },
        },
    }


# Network policies ----------------------------------------------------------------------------

def network_policies(space: SpaceInfra, cfg: InfraSettings, owner_uid: str) -> list[dict]:
    infra = space.infra

    def peer(component):
        return {"podSelector": {"matchLabels": selector(space, component)}}

    def tcp(*ports):
        return [{"protocol": "TCP", "port": p} for p in ports]

    control_plane = {"podSelector": {"matchLabels": dict(cfg.control_plane_selector)}}
    router = {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": _metadata(space, cfg, router_name(infra), "router", owner_uid),
        "spec": {
            "podSelector": {"matchLabels": selector(space, "router")},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"ports": tcp(ROUTER_AMQP_PORT, ROUTER_AMQPS_PORT)},  # the tenants' clients
                {"from": [{"podSelector": {"matchLabels": dict(cfg.gateway_selector)}}],
                 "ports": tcp(ROUTER_INTERNAL_PORT)},
                {"from": [peer("agent")], "ports": tcp(ROUTER_MANAGEMENT_PORT)},
                {"from": [peer("router")], "ports": tcp(ROUTER_INTER_ROUTER_PORT)},
                {"from": [{"podSelector": {}}], "ports": tcp(ROUTER_HTTP_PORT)},
            ],
        },
    }
    broker = {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": _metadata(space, cfg, f"broker-{infra}", "broker", owner_uid),
        "spec": {
            "podSelector": {"matchLabels": selector(space, "broker")},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [peer("router"), peer("agent"), peer("broker")],
                 "ports": tcp(BROKER_AMQPS_PORT, BROKER_MANAGEMENT_PORT)},
                {"from": [peer("broker")], "ports": tcp(*BROKER_DIST_PORTS)},
                # The worker's drainer and usage sampler read the management API.
                {"from": [control_plane], "ports": tcp(BROKER_MANAGEMENT_PORT)},
            ],
        },
    }
    return [router, broker]


# Everything ----------------------------------------------------------------------------------

def space_manifests(space: SpaceInfra, cfg: InfraSettings, owner_uid: str,
                    certs: Certificates, broker_password: str,
                    erlang_cookie: str) -> list[dict]:
    """Every object of the space except its owner ConfigMap, in apply order, sized by the
    infra config of its plan."""
    cfg = dataclasses.replace(cfg, **space.sizes)
    out = router_manifests(space, cfg, owner_uid, certs)
    out.append(broker_secret(space, cfg, owner_uid, broker_password, erlang_cookie))
    for broker in space.brokers:
        out += broker_manifests(space, cfg, owner_uid, broker, certs)
    out.append(agent_manifest(space, cfg, owner_uid, certs.trust))
    out += network_policies(space, cfg, owner_uid)
    return out


def key(manifest: dict) -> tuple[str, str, str]:
    """(kind, namespace, name) of a manifest."""
    meta = manifest["metadata"]
    return manifest["kind"], meta.get("namespace", ""), meta["name"]
