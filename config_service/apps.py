from django.apps import AppConfig


class ConfigServiceConfig(AppConfig):
    name = "config_service"
    verbose_name = "Config log and address spaces"
