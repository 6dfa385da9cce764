"""The agents this deployment runs, by kind: the storage controller always, the router agent
with `MAAS_ROUTER_ENABLED`, and the infra agent with `MAAS_INFRA_BACKEND=kubernetes`.
workers/apps.py registers `installed_agents` with the runner (`base.install`)."""
from django.conf import settings

from .base import Agent


def installed_agents() -> dict[str, Agent]:
    from workers.infra.backend import infra_agent
    from workers.storage.controller import StorageController

    agents: dict[str, Agent] = {"storage": StorageController()}
    if settings.MAAS_ROUTER_ENABLED:
        from .router import RouterAgent

        agents["router"] = RouterAgent()
    infra = infra_agent()  # None with MAAS_INFRA_BACKEND=local
    if infra is not None:
        agents[infra.kind] = infra
    return agents
