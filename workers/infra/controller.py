"""The infra controller: reconciles one standard space's workloads on Kubernetes.

Level-triggered and idempotent, like the other agents. Per reconcile it

1. server-side-applies the space's owner ConfigMap (field manager `maas-infra`) and reads its
   uid, which every other object names in its owner reference;
2. works out the brokers: those the scheduled addresses are placed on, plus the ones still
   running that no address needs any more, which go Active -> Migrating -> Draining (EnMasse's
   brokerStatuses): Migrating until every remaining broker is ready, Draining until the drainer
   reports that no stored message is left on them; only then are they removed;
3. applies every manifest (`manifests.space_manifests`), then deletes the objects of the space
   that are no longer wanted (a drained broker's StatefulSet, Service and ConfigMap);
4. reads the readiness of the router, broker StatefulSets and agent Deployment into an
   `InfraStatus` (phase, isReady, messages, brokerStatuses).

A workload deleted behind its back is applied again by the next reconcile (the resync).
Teardown deletes the owner ConfigMap; Kubernetes' garbage collector removes the rest.

The client is anything with `apply(manifest, field_manager)`, `get(api_version, kind,
namespace, name)`, `list(api_version, kind, namespace, labels)` and `delete(api_version, kind,
namespace, name)`: `kube.KubernetesClient` on a cluster, an in-process fake in the tests.
"""
import datetime
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from workers.infra import manifests as m

logger = logging.getLogger(__name__)

CERT_RENEW_BEFORE = datetime.timedelta(days=30)


class Client(Protocol):  # pragma: no cover - interface
    def apply(self, manifest: dict, field_manager: str) -> dict: ...

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict | None: ...

    def list(self, api_version: str, kind: str, namespace: str, labels: dict) -> list[dict]: ...

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool: ...


# What a Drainer returns besides a count of stored messages; the broker is kept either way.
DRAIN_UNREACHABLE = -1  # the broker could not be read
DRAIN_SETTLING = -2  # it reads empty, but the reading may predate the drain (drain.py)


class Drainer(Protocol):  # pragma: no cover - interface
    def drain(self, space: m.SpaceInfra, cluster_id: str, targets: tuple[str, ...]) -> int:
        """Moves the stored messages of `cluster_id` towards `targets` (started once, then
        continued); returns how many messages are still stored on it (0: it may be deleted),
        or DRAIN_UNREACHABLE or DRAIN_SETTLING."""


@dataclass
class BrokerStatus:
    cluster_id: str
    state: str  # Active, Migrating, Draining
    replicas: int
    ready_replicas: int
    messages_left: int | None = None

    @property
    def ready(self) -> bool:
        return self.ready_replicas >= self.replicas > 0

    def as_dict(self) -> dict:
        out = {"clusterId": self.cluster_id, "state": self.state, "replicas": self.replicas,
               "readyReplicas": self.ready_replicas}
        if self.messages_left is not None:
            out["messagesLeft"] = self.messages_left
        return out


@dataclass
class InfraStatus:
    router_replicas: int = 0
    router_ready: int = 0
    agent_ready: bool = False
    brokers: list[BrokerStatus] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)

    @property
    def is_ready(self) -> bool:
        return not self.messages

    @property
    def phase(self) -> str:
        return "Active" if self.is_ready else "Configuring"

    def broker_ready(self, cluster_id: str) -> bool:
        return any(b.cluster_id == cluster_id and b.ready and b.state == "Active"
                   for b in self.brokers)

    def as_dict(self) -> dict:
        return {"phase": self.phase, "isReady": self.is_ready, "messages": list(self.messages),
                "routers": {"replicas": self.router_replicas, "readyReplicas": self.router_ready},
                "brokerStatuses": [b.as_dict() for b in self.brokers]}


def workload_ready(obj: dict | None) -> tuple[int, int]:
    """(desired replicas, ready replicas) of a StatefulSet or Deployment; a stale status (older
    than the spec's generation) counts as not ready."""
    if not obj:
        return 0, 0
    desired = int((obj.get("spec") or {}).get("replicas", 1) or 0)
    status = obj.get("status") or {}
    generation = (obj.get("metadata") or {}).get("generation")
    if generation is not None and status.get("observedGeneration", 0) < generation:
        return desired, 0
    ready = status.get("availableReplicas" if obj.get("kind") == "Deployment"
                       else "readyReplicas", 0) or 0
    return desired, min(int(ready), desired)


def make_certificate(hosts: list[str], now: datetime.datetime | None = None) -> m.Certificate:
    """A self-signed certificate for the router's AMQPS listener (EnMasse's `selfsigned`)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = now or datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0][:64])])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=825))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in hosts]),
                       critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return m.Certificate(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM).decode(),
        key_pem=key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()).decode(),
    )


def _certificate_still_good(cert_pem: str, hosts: list[str]) -> bool:
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(cert_pem.encode())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    remaining = cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    return remaining > CERT_RENEW_BEFORE and set(hosts) <= set(names.get_values_for_type(
        x509.DNSName))


class InfraController:
    """Reconciles the Kubernetes objects of standard address spaces."""

    def __init__(self, client: Client, drainer: Drainer, cfg: m.InfraSettings,
                 secret: Callable[[str, str], str], field_manager: str = m.FIELD_MANAGER):
        """`secret(purpose, infra)`: a space's random credential (`broker-admin`,
        `erlang-cookie`), the same on every call until it is rotated."""
        self.client, self.drainer, self.cfg = client, drainer, cfg
        self.secret, self.field_manager = secret, field_manager

    # Reconcile -------------------------------------------------------------------------------

    def reconcile(self, desired: m.SpaceInfra) -> InfraStatus:
        ns, infra = self.cfg.namespace, desired.infra
        owner = self.client.apply(m.owner_manifest(desired, self.cfg), self.field_manager)
        owner_uid = owner["metadata"]["uid"]
        space, leaving = self._brokers(desired)
        manifests = m.space_manifests(
            space, self.cfg, owner_uid, self._certificate(space), self._mesh_certificate(space),
            self.secret("broker-admin", infra), self.secret("erlang-cookie", infra),
        )
        live = {}
        for manifest in manifests:
            live[m.key(manifest)] = self.client.apply(manifest, self.field_manager)
        self._prune(desired, {m.key(x) for x in manifests})
        status = self._status(space, live, leaving)
        logger.info("infra.reconciled", extra={"space": desired.uid, "infra": infra,
                                               "namespace": ns, "phase": status.phase})
        return status

    def _brokers(self, desired: m.SpaceInfra) -> tuple[m.SpaceInfra, dict]:
        """The space with the brokers being removed appended in their next state; a drained
        broker is left out (and so pruned). Returns (space, {clusterId: messages left})."""
        ns, infra = self.cfg.namespace, desired.infra
        running = {
            (s["metadata"].get("labels") or {}).get(m.LABEL_BROKER): s
            for s in self.client.list("apps/v1", "StatefulSet", ns,
                                      {m.LABEL_INFRA: infra, m.LABEL_COMPONENT: "broker"})
        }
        wanted = {b.cluster_id for b in desired.brokers}
        wanted_ready = all(
            self._ready_broker(running.get(c), b.replicas)
            for c, b in ((b.cluster_id, b) for b in desired.brokers)
        )
        targets = tuple(b.cluster_id for b in desired.brokers)
        leaving_brokers, leaving = [], {}
        for cluster_id in sorted(c for c in running if c and c not in wanted):
            sts = running[cluster_id]
            state = (sts["metadata"].get("annotations") or {}).get(
                m.ANNOTATION_BROKER_STATE, "Active")
            replicas = int(sts["spec"].get("replicas", 1) or 1)
            if state == "Active":
                state = "Migrating"
            elif state == "Migrating" and wanted_ready:
                state = "Draining"
            if state == "Draining":
                left = self.drainer.drain(desired, cluster_id, targets)
                logger.info("infra.draining", extra={"space": desired.uid, "broker": cluster_id,
                                                     "messages_left": left})
                if left == 0:
                    continue  # drained: no longer applied, so pruned below
                leaving[cluster_id] = left
            else:
                leaving[cluster_id] = None
            leaving_brokers.append(m.Broker(cluster_id, replicas, state))
        return replace(desired, brokers=desired.brokers + tuple(leaving_brokers)), leaving

    @staticmethod
    def _ready_broker(sts: dict | None, replicas: int) -> bool:
        desired, ready = workload_ready(sts)
        return sts is not None and desired == replicas and ready >= replicas

    def _certificate(self, space: m.SpaceInfra) -> m.Certificate:
        if space.tls is not None:  # its messaging endpoint's own (spec.endpoints): each
            return space.tls       # space has its own router here, so no SNI is needed
        router = m.router_name(space.infra)
        hosts = [m.service_host(router, self.cfg), f"{router}.{self.cfg.namespace}", router,
                 f"{m.service_host(router, self.cfg)}.cluster.local"]
        return self._kept_or_new(space, m.tls_secret_name(space.infra), hosts)

    def _mesh_certificate(self, space: m.SpaceInfra) -> m.Certificate:
        """The certificate every router replica of the space presents to the others and
        trusts: their links to each other take nothing else."""
        return self._kept_or_new(space, m.mesh_secret_name(space.infra),
                                 m.mesh_hosts(space.infra, self.cfg))

    def _kept_or_new(self, space: m.SpaceInfra, secret_name: str,
                     hosts: list[str]) -> m.Certificate:
        """The certificate in the Secret, while it names `hosts` and is not near its end;
        else a new one."""
        import base64

        secret = self.client.get("v1", "Secret", self.cfg.namespace, secret_name)
        data = (secret or {}).get("data") or {}
        if "tls.crt" in data and "tls.key" in data:
            cert = base64.b64decode(data["tls.crt"]).decode()
            if _certificate_still_good(cert, hosts):
                return m.Certificate(cert, base64.b64decode(data["tls.key"]).decode())
        logger.info("infra.certificate_issued", extra={"space": space.uid,
                                                       "secret": secret_name})
        return make_certificate(hosts)

    def _prune(self, space: m.SpaceInfra, keep: set) -> None:
        ns = self.cfg.namespace
        for api_version, kind in m.OWNED_KINDS:
            for obj in self.client.list(api_version, kind, ns, {m.LABEL_INFRA: space.infra}):
                name = obj["metadata"]["name"]
                if (kind, ns, name) in keep or name == m.owner_name(space.infra):
                    continue
                logger.info("infra.pruned", extra={"space": space.uid, "object": f"{kind}/{name}"})
                self.client.delete(api_version, kind, ns, name)

    def _status(self, space: m.SpaceInfra, live: dict, leaving: dict) -> InfraStatus:
        ns, infra = self.cfg.namespace, space.infra
        status = InfraStatus()
        router = live.get(("StatefulSet", ns, m.router_name(infra)))
        status.router_replicas, status.router_ready = workload_ready(router)
        if status.router_ready < status.router_replicas:
            status.messages.append(
                f"Router {status.router_ready}/{status.router_replicas} ready")
        for broker in space.brokers:
            sts = live.get(("StatefulSet", ns, m.broker_name(infra, broker.cluster_id)))
            replicas, ready = workload_ready(sts)
            bs = BrokerStatus(broker.cluster_id, broker.state, replicas, ready,
                              leaving.get(broker.cluster_id))
            status.brokers.append(bs)
            if broker.state == "Draining":
                left = {DRAIN_UNREACHABLE: "broker unreachable",
                        DRAIN_SETTLING: "confirming it is empty"}.get(
                    bs.messages_left, f"{bs.messages_left} messages left")
                status.messages.append(f"Broker {broker.cluster_id} is Draining ({left})")
            elif broker.state == "Migrating":
                status.messages.append(f"Broker {broker.cluster_id} is Migrating")
            elif not bs.ready:
                status.messages.append(f"Broker {broker.cluster_id} {ready}/{replicas} ready")
        _, agent_ready = workload_ready(live.get(("Deployment", ns, m.agent_name(infra))))
        status.agent_ready = agent_ready >= 1
        if not status.agent_ready:
            status.messages.append("Agent not ready")
        return status

    # Teardown --------------------------------------------------------------------------------

    def teardown(self, space: m.SpaceInfra) -> bool:
        """Deletes the owner ConfigMap; True once nothing of the space is left."""
        ns = self.cfg.namespace
        self.client.delete("v1", "ConfigMap", ns, m.owner_name(space.infra))
        left = [
            f"{kind}/{obj['metadata']['name']}"
            for api_version, kind in m.OWNED_KINDS
            for obj in self.client.list(api_version, kind, ns, {m.LABEL_INFRA: space.infra})
        ]
        if left:
            logger.info("infra.collecting", extra={"space": space.uid, "left": len(left)})
        return not left
