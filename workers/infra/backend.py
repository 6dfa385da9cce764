"""The infra agent (kind "infra") and the choice of backend by setting.

`MAAS_INFRA_BACKEND=local` (the default): the routers and brokers are processes on this
machine (`make run`: the embedded router and the local RabbitMQ), so there is nothing to
start per space and the agent is not installed. `kubernetes`: `InfraAgent` runs each standard
space's router, brokers and agent on the cluster through `InfraController`. The address space
lifecycle only ever sees an agent of kind "infra".
"""
import logging
from functools import cached_property

from django.conf import settings

from config_service.models import Address, AddressSpace, AgentState

from .. import credentials
from ..agents.base import Agent, Report, TransientError
from . import manifests as m
from .controller import InfraController, InfraStatus

logger = logging.getLogger(__name__)

BACKENDS = ("local", "kubernetes")
KIND = "infra"
# In the space's agent pod: they clean up their targets before the infra is deleted.
DEPENDENT_KINDS = ("storage", "router")


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
        router_admin_user=get("MAAS_ROUTER_ADMIN_USER", defaults.router_admin_user),
    )


def space_infra_of(space: AddressSpace) -> m.SpaceInfra:
    """The SpaceInfra of a space as the projections hold it now."""
    rows = Address.objects.filter(space=space, scheduled=True).values_list(
        "type", "plan_status", "placement")
    min_replicas = int((space.plan_status.get("infraConfig") or {}).get("minReplicas", 1) or 1)
    return m.space_infra(space.uid, space.tenant.slug, space.name, space.plan, rows,
                         min_router_replicas=min_replicas)


def report(space: AddressSpace, status: InfraStatus) -> Report:
    """Readiness into the space's status: a space error while not ready, and an error on each
    address whose broker (or the router) is not ready yet."""
    errors = {}
    router_down = status.router_ready < 1
    for name, placement in Address.objects.filter(space=space, scheduled=True).values_list(
            "name", "placement"):
        waiting = [p["clusterId"] for p in placement or ()
                   if not status.broker_ready(p["clusterId"])]
        if router_down:
            errors[name] = {"message": "Router is not ready", "permanent": False}
        elif waiting:
            errors[name] = {"message": f"Broker {', '.join(sorted(set(waiting)))} is not ready",
                            "permanent": False}
    return Report(address_errors=errors, space_error="; ".join(status.messages)[:500])


def infra_secret(purpose: str, infra: str) -> str:
    """A space's random infra credential (`broker-admin`, `erlang-cookie`), kept encrypted."""
    return credentials.value(credentials.infra_name(purpose, infra))


class InfraAgent(Agent):
    kind = KIND

    def __init__(self, controller: InfraController | None = None):
        if controller is not None:
            self.__dict__["controller"] = controller

    @cached_property
    def controller(self) -> InfraController:
        """Made on first use, so installing the agent costs nothing where it does not run."""
        from .drain import RabbitMQDrainer
        from .kube import KubernetesClient

        cfg = infra_settings()
        drainer = RabbitMQDrainer(cfg, lambda infra: infra_secret("broker-admin", infra))
        return InfraController(KubernetesClient(), drainer, cfg, infra_secret)

    def reconcile(self, space: AddressSpace) -> Report:
        if space.type != "standard":
            return Report()  # brokered spaces use the shared RabbitMQ
        from .kube import KubernetesError

        try:
            status = self.controller.reconcile(space_infra_of(space))
        except KubernetesError as exc:
            if exc.transient:
                raise TransientError(str(exc)) from exc
            return Report(space_error=f"Kubernetes refused the infra: {exc}"[:500])
        return report(space, status)

    def teardown(self, space: AddressSpace) -> None:
        if space.type != "standard":
            return
        waiting = AgentState.objects.filter(space_uid=space.uid, kind__in=DEPENDENT_KINDS,
                                            torn_down=False).values_list("kind", flat=True)
        if list(waiting):
            raise TransientError(f"waiting for the {', '.join(sorted(waiting))} agent to clean up")
        from .kube import KubernetesError

        try:
            done = self.controller.teardown(space_infra_of(space))
        except KubernetesError as exc:
            raise TransientError(str(exc)) from exc
        if not done:
            raise TransientError("waiting for Kubernetes to collect the space's objects")
        infra = space_infra_of(space).infra
        for purpose in ("broker-admin", "erlang-cookie"):
            credentials.forget(credentials.infra_name(purpose, infra))


def infra_agent() -> Agent | None:
    """The infra agent of the configured backend (None for `local`)."""
    return InfraAgent() if backend() == "kubernetes" else None
