"""Confirmation pages and the audit trail shared by the dashboard's actions.

Every state-changing action asks first (one page, listing what it will touch)
and records what it did in the admin's ``LogEntry`` under the acting user, so
"who replayed these?" has an answer on each object's history page.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.db.models import Model
from django.http import HttpRequest
from django.template.response import TemplateResponse

SHOWN = 50  # objects listed by name on a confirmation page; the rest are counted


def is_confirmed(request: HttpRequest) -> bool:
    return request.method == "POST" and request.POST.get("confirm") == "yes"


def confirmation_page(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    *,
    title: str,
    question: str,
    objects: Sequence[Any],
    total: int,
    back_url: str,
    action: str | None = None,
    warning: str | None = None,
    confirm_label: str | None = None,
) -> TemplateResponse:
    """The page an action shows before acting; posting it back (``confirm=yes``) acts."""
    context = {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "question": question,
        "warning": warning,
        "objects": list(objects[:SHOWN]),
        "more": max(0, total - min(len(objects), SHOWN)),
        "opts": model_admin.model._meta,
        "action": action,
        # An admin action is re-posted to the changelist with the same selection.
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME) if action else [],
        "select_across": request.POST.get("select_across") == "1",
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "back_url": back_url,
        "confirm_label": confirm_label,
    }
    return TemplateResponse(request, "admin/dashboard/confirm_action.html", context)


def actor(request: HttpRequest) -> str:
    """How the history of a task names the operator (``TaskEvent.detail``)."""
    return f"admin:{request.user.get_username()}"


def log_changes(request: HttpRequest, objects: Iterable[Model], message: str) -> None:
    _log(request, objects, CHANGE, message)


def log_deletions(request: HttpRequest, objects: Iterable[Model], message: str) -> None:
    _log(request, objects, DELETION, message)


def _log(request: HttpRequest, objects: Iterable[Model], flag: int, message: str) -> None:
    objects = list(objects)
    if objects:
        # The admin runs its actions for a logged-in staff user only: the id is never None.
        LogEntry.objects.log_actions(cast(int, request.user.pk), objects, flag, change_message=message)
