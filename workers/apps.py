from django.apps import AppConfig


class WorkersConfig(AppConfig):
    name = "workers"
    verbose_name = "Workers and agents"

    def ready(self) -> None:
        # config_service and tenants sit below workers and never import it: workers plugs in
        # the after-commit fan-out, the live quota evaluation and the data-plane reads here
        # (docs/architecture.md, "Layers").
        from config_service import readings
        from eventlog import fanout
        from tenants import services as tenant_services
        from workers import dispatch
        from workers.agents import installed, runner
        from workers.readings import WorkersReadings
        from workers.usage import live_quota

        fanout.register(dispatch.notify_space)
        tenant_services.register_quota_evaluation(live_quota.queue_evaluation)
        readings.register(WorkersReadings())
        runner.install(installed.installed_agents)
