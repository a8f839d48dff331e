"""API keys: list, create (the raw key is shown once) and revoke. Only a hash is ever stored."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from dashboard import confirm
from queues.apikeys import create_key, revoke_key
from queues.models import ApiKey


class ApiKeyCreateForm(forms.ModelForm):
    class Meta:
        model = ApiKey
        fields = ("name", "role")


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    form = ApiKeyCreateForm
    list_display = ("name", "role", "prefix", "created_at", "revoked_at")
    list_filter = ("role", ("revoked_at", admin.EmptyFieldListFilter))
    search_fields = ("name", "prefix")
    readonly_fields = ("name", "role", "prefix", "created_at", "revoked_at")
    actions = ("revoke_keys",)

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> tuple[str, ...]:
        return self.readonly_fields if obj is not None else ()

    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> tuple[str, ...]:
        return self.readonly_fields if obj is not None else ("name", "role")

    def has_change_permission(self, request: HttpRequest, obj: ApiKey | None = None) -> bool:
        return False  # keys are immutable; revoke and create another

    def has_delete_permission(self, request: HttpRequest, obj: ApiKey | None = None) -> bool:
        return False  # revoked keys stay listed, for the record

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("queues.change_apikey")

    def save_model(self, request: HttpRequest, obj: ApiKey, form: forms.ModelForm, change: bool) -> None:
        key, raw = create_key(obj.name, obj.role, actor=confirm.actor(request))
        obj.pk, obj.prefix, obj.created_at = key.pk, key.prefix, key.created_at
        self.message_user(
            request,
            f"API key {key.name!r} created. Copy it now, it is not shown again: {raw}",
            messages.WARNING,
        )

    @admin.action(description="Revoke selected API keys", permissions=["revoke"])
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        revoked = [
            key
            for key in queryset.filter(revoked_at__isnull=True)
            if revoke_key(key.name, actor=confirm.actor(request))
        ]
        confirm.log_changes(request, revoked, "Revoked")
        self.message_user(request, f"Revoked {len(revoked)} key(s).", messages.SUCCESS)
