"""The agents this deployment runs, by kind: the storage controller always, the router agent
with `MAAS_ROUTER_ENABLED`, and the infra agent with `MAAS_INFRA_BACKEND=kubernetes`.
workers/apps.py registers `installed_agents` with the runner (`base.install`)."""
from django.conf import settings

from workers.agents.runner import Agent


def installed_agents() -> dict[str, Agent]:
    from workers.agents.infra import infra_agent
    from workers.agents.storage.agent import StorageController

    agents: dict[str, Agent] = {"storage": StorageController()}
    if settings.MAAS_ROUTER_ENABLED:
        from workers.agents.router.agent import RouterAgent

        agents["router"] = RouterAgent()
    infra = infra_agent()  # None with MAAS_INFRA_BACKEND=local
    if infra is not None:
        agents[infra.kind] = infra
    return agents
