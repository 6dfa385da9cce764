"""The infra agent (kind "infra"), installed with `MAAS_INFRA_BACKEND=kubernetes`: runs each
standard space's router, brokers and agent on the cluster through `InfraController` and reports
their readiness. The address space lifecycle only ever sees an agent of kind "infra"."""
from functools import cached_property

from config_service.models import Address, AddressSpace, AgentState
from workers import credentials
from workers.agents.runner import Agent, Report, TransientError
from workers.infra.backend import (
    backend,
    infra_secret,
    infra_settings,
    internal_ca_lock,
    queue_placement,
    space_infra_of,
)
from workers.infra.controller import InfraController, InfraStatus

KIND = "infra"
# In the space's agent pod: they clean up their targets before the infra is deleted.
DEPENDENT_KINDS = ("storage", "router")


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


class InfraAgent(Agent):
    kind = KIND

    def __init__(self, controller: InfraController | None = None):
        if controller is not None:
            self.__dict__["controller"] = controller

    @cached_property
    def controller(self) -> InfraController:
        """Made on first use, so installing the agent costs nothing where it does not run."""
        from config_service.brokers import internal_ca
        from workers.infra.drain import RabbitMQDrainer
        from workers.infra.kube import KubernetesClient

        cfg = infra_settings()
        # The brokers' API is checked against the internal CA bundle the worker mounts
        # (MAAS_INTERNAL_TLS_DIR), read at each drain: a rotation's new bundle is used at once.
        drainer = RabbitMQDrainer(cfg, lambda infra: infra_secret("broker-admin", infra),
                                  ca=lambda: internal_ca() or None, placed=queue_placement)
        return InfraController(KubernetesClient(), drainer, cfg, infra_secret,
                               ca_lock=internal_ca_lock)

    def reconcile(self, space: AddressSpace) -> Report:
        if space.type != "standard":
            return Report()  # brokered spaces use the shared RabbitMQ
        from workers.infra.kube import KubernetesError

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
        from workers.infra.kube import KubernetesError

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
