"""Admin for operators: the config log and its outbox, read-only and filterable."""
from django.contrib import admin

from core.admin import ReadOnlyAdmin

from .models import ConfigEvent, Outbox


@admin.register(ConfigEvent)
class ConfigEventAdmin(ReadOnlyAdmin):
    list_display = ["position", "created_at", "tenant", "type", "stream", "sequence", "actor",
                    "request_id"]
    list_filter = ["type", "tenant", "actor"]
    search_fields = ["stream__uid", "request_id", "actor"]
    date_hierarchy = "created_at"


@admin.register(Outbox)
class OutboxAdmin(ReadOnlyAdmin):
    list_display = ["event", "stream_uid", "sequence", "created_at", "attempts", "acked_at"]
    list_filter = [("acked_at", admin.EmptyFieldListFilter)]
