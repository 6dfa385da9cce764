from django.apps import AppConfig
from django.core import checks


class ConfigServiceConfig(AppConfig):
    name = "config_service"
    verbose_name = "Address spaces"

    def ready(self) -> None:
        # The layers below never import this app: it hands the event log its projections and
        # the tenant services a tenant's address spaces (docs/architecture.md, "Layers").
        from eventlog import log
        from tenants import services as tenant_services

        from . import infra_configs, projections
        from .services import TenantSpaces

        log.register_projections(projections)
        tenant_services.register_spaces(TenantSpaces())
        checks.register(infra_configs.check)
