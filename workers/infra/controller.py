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

The internal certificates (the routers' mesh and internal ones, each broker's) are signed by
the platform's internal CA (internal_ca.py), kept in their Secrets and signed again near their
end, when the names they need change, or when the CA that signs is another: after a rotation
only once every pod of the space runs with a trust bundle that holds the new CA (the pod
template's `maas.io/trust`, rolled out), so no link of the space ever meets a certificate its
other end does not trust yet ("trust first").

A workload deleted behind its back is applied again by the next reconcile (the resync).
Teardown deletes the owner ConfigMap; Kubernetes' garbage collector removes the rest.

The client is anything with `apply(manifest, field_manager)`, `get(api_version, kind,
namespace, name)`, `list(api_version, kind, namespace, labels)` and `delete(api_version, kind,
namespace, name)`: `kube.KubernetesClient` on a cluster, an in-process fake in the tests.
"""
import contextlib
import datetime
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from workers import pki
from workers.infra import internal_ca
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


def rolled_out(obj: dict) -> bool:
    """Whether every pod of a StatefulSet or Deployment runs its current pod template."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    replicas = int(spec.get("replicas", 1) or 0)
    if status.get("observedGeneration", 0) < ((obj.get("metadata") or {}).get("generation") or 0):
        return False
    if int(status.get("updatedReplicas", 0) or 0) < replicas:
        return False
    if obj.get("kind") == "StatefulSet":
        return status.get("currentRevision") == status.get("updateRevision")
    return int(status.get("replicas", 0) or 0) == replicas  # no pod of an older template left


def make_certificate(hosts: list[str], now: datetime.datetime | None = None) -> m.Certificate:
    """A self-signed certificate for the router's AMQPS listener (EnMasse's `selfsigned`)."""
    return m.Certificate(*pki.self_signed(hosts, now=now))


class InfraController:
    """Reconciles the Kubernetes objects of standard address spaces."""

    def __init__(self, client: Client, drainer: Drainer, cfg: m.InfraSettings,
                 secret: Callable[[str, str], str], field_manager: str = m.FIELD_MANAGER,
                 ca_lock: Callable = contextlib.nullcontext):
        """`secret(purpose, infra)`: a space's random credential (`broker-admin`,
        `erlang-cookie`), the same on every call until it is rotated; `ca_lock()`: held while
        the internal CA is made (one maker across processes: an advisory lock)."""
        self.client, self.drainer, self.cfg = client, drainer, cfg
        self.secret, self.field_manager, self.ca_lock = secret, field_manager, ca_lock

    # Reconcile -------------------------------------------------------------------------------

    def reconcile(self, desired: m.SpaceInfra) -> InfraStatus:
        ns, infra = self.cfg.namespace, desired.infra
        owner = self.client.apply(m.owner_manifest(desired, self.cfg), self.field_manager)
        owner_uid = owner["metadata"]["uid"]
        space, leaving = self._brokers(desired)
        manifests = m.space_manifests(
            space, self.cfg, owner_uid, self._certificates(space),
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

    def _certificates(self, space: m.SpaceInfra) -> m.Certificates:
        """The tenants' AMQPS certificate and the internal ones: the mesh certificate every
        router replica presents to the others, the routers' internal one (management, the
        MQTT gateway's listener) and each broker's, all of the internal CA."""
        ns, infra = self.cfg.namespace, space.infra
        ca = internal_ca.ensure(self.client, ns, self.ca_lock)
        trusted = functools.cache(lambda: self._trusted_by_every_pod(space, ca.bundle))

        def issued(secret_name: str, hosts: list[str]) -> m.Certificate:
            return self._issued(space, secret_name, hosts, ca, trusted)

        return m.Certificates(
            tls=self._certificate(space),
            mesh=issued(m.mesh_secret_name(infra), m.mesh_hosts(infra, self.cfg)),
            internal=issued(m.internal_secret_name(infra), m.internal_hosts(infra, self.cfg)),
            brokers={b.cluster_id: issued(m.broker_tls_secret_name(infra, b.cluster_id),
                                          m.broker_hosts(infra, b.cluster_id, self.cfg))
                     for b in space.brokers},
            trust=ca.bundle,
            auth_ca=self.cfg.auth_service_ca or internal_ca.auth_service_ca(self.client, ns, ca))

    def _trusted_by_every_pod(self, space: m.SpaceInfra, trust: str) -> bool:
        """Whether every pod that read the space's bundle at its start (the routers', the
        agent's: their templates' `maas.io/trust`) runs with the bundle `trust`."""
        ns, want = self.cfg.namespace, m.trust_hash(trust)
        router = self.client.get("apps/v1", "StatefulSet", ns, m.router_name(space.infra))
        agent = self.client.get("apps/v1", "Deployment", ns, m.agent_name(space.infra))
        for obj in (router, agent):
            if obj is None:
                continue  # made with this bundle
            template = (obj.get("spec") or {}).get("template") or {}
            annotations = (template.get("metadata") or {}).get("annotations") or {}
            if annotations.get(m.ANNOTATION_TRUST) != want or not rolled_out(obj):
                return False
        return True

    def _issued(self, space: m.SpaceInfra, secret_name: str, hosts: list[str],
                ca: internal_ca.InternalCa, trusted: Callable[[], bool]) -> m.Certificate:
        """The certificate in the Secret while it names `hosts`, is not near its end and the
        signing CA signed it (or the previous CA, until `trusted()`: every pod trusts the new
        one); else a new one of the signing CA."""
        kept = self._kept(secret_name)
        if kept is not None and pki.still_good(kept.cert_pem, hosts, renew_before=CERT_RENEW_BEFORE):
            if ca.issued(kept.cert_pem):
                return kept
            if ca.trusted(kept.cert_pem) and not trusted():
                logger.info("infra.certificate_waits_for_trust",
                            extra={"space": space.uid, "secret": secret_name})
                return kept
        logger.info("infra.certificate_issued", extra={"space": space.uid,
                                                       "secret": secret_name})
        return ca.issue(hosts)

    def _kept(self, secret_name: str) -> m.Certificate | None:
        import base64

        secret = self.client.get("v1", "Secret", self.cfg.namespace, secret_name)
        data = (secret or {}).get("data") or {}
        if "tls.crt" in data and "tls.key" in data:
            return m.Certificate(base64.b64decode(data["tls.crt"]).decode(),
                                 base64.b64decode(data["tls.key"]).decode())
        return None

    def _kept_or_new(self, space: m.SpaceInfra, secret_name: str,
                     hosts: list[str]) -> m.Certificate:
        """The certificate in the Secret, while it names `hosts` and is not near its end;
        else a new self-signed one."""
        kept = self._kept(secret_name)
        if kept is not None and pki.still_good(kept.cert_pem, hosts,
                                               renew_before=CERT_RENEW_BEFORE):
            return kept
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
