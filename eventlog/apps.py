from django.apps import AppConfig


class EventLogConfig(AppConfig):
    name = "eventlog"
    verbose_name = "Config log"
