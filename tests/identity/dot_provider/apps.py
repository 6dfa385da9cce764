from django.apps import AppConfig


class DotProviderConfig(AppConfig):
    name = "tests.identity.dot_provider"
    label = "dot_provider"
