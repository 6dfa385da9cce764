"""The choice of backend by setting, and what the Kubernetes backend reads of a space.

`MAAS_INFRA_BACKEND=local` (the default): the routers and brokers are processes on this
machine (`make run`: the embedded router and the local RabbitMQ), so there is nothing to
start per space. `kubernetes`: the infra agent (workers/agents/infra.py) runs each standard
space's router, brokers and agent on the cluster through `InfraController`.
"""
import dataclasses
import logging

from django.conf import settings

from config_service import infra_configs, space_endpoints
from config_service.models import Address, AddressSpace
from config_service.models.projections import broker_object_name
from core.locks import advisory_lock
from tenants.models import AddressSpacePlan
from workers import certificates, credentials
from workers.infra import manifests as m

logger = logging.getLogger(__name__)

BACKENDS = ("local", "kubernetes")


def backend() -> str:
    value = getattr(settings, "MAAS_INFRA_BACKEND", "local")
    if value not in BACKENDS:
        raise ValueError(f"MAAS_INFRA_BACKEND must be one of {', '.join(BACKENDS)}, not {value}")
    return value


def infra_settings() -> m.InfraSettings:
    defaults = m.InfraSettings()

    def get(name, default):
        value = getattr(settings, name, None)
        return default if value in (None, "") else value

    return m.InfraSettings(
        namespace=get("MAAS_INFRA_NAMESPACE", defaults.namespace),
        router_image=get("MAAS_ROUTER_IMAGE", defaults.router_image),
        broker_image=get("MAAS_BROKER_IMAGE", defaults.broker_image),
        control_plane_image=get("MAAS_CONTROL_PLANE_IMAGE", defaults.control_plane_image),
        broker_storage=get("MAAS_BROKER_STORAGE", defaults.broker_storage),
        storage_class=get("MAAS_BROKER_STORAGE_CLASS", defaults.storage_class),
        router_service_type=get("MAAS_ROUTER_SERVICE_TYPE", defaults.router_service_type),
        config_map=get("MAAS_INFRA_CONFIG_MAP", defaults.config_map),
        secret=get("MAAS_INFRA_SECRET", defaults.secret),
        auth_service_host=get("MAAS_INFRA_AUTH_SERVICE_HOST", defaults.auth_service_host),
        auth_service_port=int(get("MAAS_INFRA_AUTH_SERVICE_PORT", defaults.auth_service_port)),
        auth_service_ca=_read(get("MAAS_INFRA_AUTH_SERVICE_CA", "")),
        router_admin_user=get("MAAS_ROUTER_ADMIN_USER", defaults.router_admin_user),
    )


def _read(path: str) -> str:
    """The file's text, "" if there is none (an optional Secret not created)."""
    if not path:
        return ""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def space_infra_of(space: AddressSpace) -> m.SpaceInfra:
    """The SpaceInfra of a space as the projections hold it now, sized by the infra config
    its plan names now (an operator's change of either applies at the next reconcile)."""
    rows = Address.objects.filter(space=space, scheduled=True).values_list(
        "type", "plan_status", "placement")
    ref = AddressSpacePlan.objects.filter(name=space.plan).values_list(
        "infra_config_ref", flat=True).first()
    config = infra_configs.get(ref)
    sizes = m.sized_settings(config, infra_settings())
    exposed = {e["service"]: e["expose"]["type"] for e in space_endpoints.of(space.spec)}
    if exposed.get("messaging") in m.SERVICE_TYPES:  # the space's own exposure of its router
        sizes["router_service_type"] = m.SERVICE_TYPES[exposed["messaging"]]
    infra = m.space_infra(space.uid, space.tenant.slug, space.name, space.plan, rows,
                          min_router_replicas=(config.get("router") or {}).get("minReplicas", 1),
                          min_broker_replicas=(config.get("broker") or {}).get(
                              "minReplicas", settings.MAAS_BROKER_REPLICAS),
                          sizes=sizes)
    return dataclasses.replace(infra, tls=_own_certificate(space))


def _own_certificate(space: AddressSpace) -> m.Certificate | None:
    """The certificate of the space's `messaging` endpoint, or None."""
    names = {e["service"]: e["name"] for e in space_endpoints.of(space.spec)}
    if "messaging" not in names:
        return None
    try:
        served = certificates.served(space)
    except certificates.CertificateError as exc:  # the router agent reports it on the space
        logger.warning("infra.certificate_unusable", extra={"space": str(space.uid),
                                                            "error": str(exc)})
        return None
    for endpoint in served:
        if endpoint.endpoint == names["messaging"]:
            return m.Certificate(endpoint.chain, endpoint.key)
    return None


def queue_placement(space: m.SpaceInfra, queue: str) -> tuple[str, ...]:
    """The clusterIds the space's address whose broker queue is `queue` is placed on now; ()
    for none (deleted): where a draining broker's messages of that queue go (drain.py)."""
    rows = Address.objects.filter(space__uid=space.uid, scheduled=True).values_list(
        "type", "address", "topic", "placement")
    for kind, address, topic, placement in rows:
        if broker_object_name(kind, address, topic) == queue:
            return tuple(p["clusterId"] for p in placement or ())
    return ()


def infra_secret(purpose: str, infra: str) -> str:
    """A space's random infra credential (`broker-admin`, `erlang-cookie`), kept encrypted."""
    return credentials.value(credentials.infra_name(purpose, infra))


# One maker of the internal CA at a time, across every process that may make or rotate it
# (the workers' infra controllers, the migrations Job's `internal_ca`, `rotate_secrets`).
_INTERNAL_CA_LOCK = 0x6D616361  # "maca"


def internal_ca_lock():
    """A session-level advisory lock, let go when the block ends or the process dies."""
    return advisory_lock(_INTERNAL_CA_LOCK)
