from django.apps import AppConfig


class WorkersConfig(AppConfig):
    name = "workers"
    verbose_name = "Workers and agents"

    def ready(self) -> None:
        # config_service sits below workers and never imports it: workers plugs in the
        # after-commit fan-out and the data-plane reads here (docs/architecture.md, "Layers").
        from config_service import dataplane, fanout

        from . import dispatch
        from .agents import base, installed
        from .dataplane import WorkersDataPlane

        fanout.register(dispatch.notify_space)
        dataplane.register(WorkersDataPlane())
        base.install(installed.installed_agents)
