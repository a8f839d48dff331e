"""Admin registrations (read-mostly; state changes go through queues.lifecycle)."""

from django.contrib import admin

from queues.models import ApiKey, DeadLetterTask, Queue, Task


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    list_display = ("name", "paused", "rate_limit", "rate_burst", "max_retries")


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ("id", "queue", "status", "priority", "attempts", "scheduled_at", "created_at")
    list_filter = ("status",)
    list_select_related = ("queue",)
    show_full_result_count = False

    def has_change_permission(self, request, obj=None):  # type: ignore[no-untyped-def]
        return False

    def has_add_permission(self, request):  # type: ignore[no-untyped-def]
        return False


@admin.register(DeadLetterTask)
class DeadLetterAdmin(admin.ModelAdmin):
    list_display = ("task", "queue", "died_at", "attempts", "replay_count")

    def has_add_permission(self, request):  # type: ignore[no-untyped-def]
        return False


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("name", "role", "prefix", "created_at", "revoked_at")
    readonly_fields = ("prefix", "created_at")
