"""The identity app: links users to their identity at the provider (docs/identity.md)."""
from django.apps import AppConfig


class IdentityConfig(AppConfig):
    name = "tenants.identity"
    label = "identity"
    verbose_name = "Identity"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from . import schema  # noqa: F401 - registers the OpenAPI security schemes
