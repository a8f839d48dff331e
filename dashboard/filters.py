"""Changelist filters that stay cheap on a million tasks.

Django's stock filters either list every distinct value (a full scan of
``tf_task`` for ``claimed_by``) or offer only fixed date ranges. These render a
small form instead: an exact worker id, a from/before time range. Each one
becomes a plain equality or range condition that the indexes can serve.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest


class FormFilter(admin.FieldListFilter):
    """A filter rendered as a small GET form with one input per lookup."""

    template = "admin/dashboard/form_filter.html"
    # (lookup suffix, label, HTML input type)
    inputs: tuple[tuple[str, str, str], ...] = ()
    title_override: str | None = None

    def __init__(self, field: Any, request: HttpRequest, params: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        super().__init__(field, request, params, *args, **kwargs)
        if self.title_override:
            self.title = self.title_override
        self.request = request

    def parameter_names(self) -> list[str]:
        """One query parameter per input, in ``inputs`` order."""
        return [f"{self.field_path}__{suffix}" for suffix, _, _ in self.inputs]

    def expected_parameters(self) -> list[str | None]:
        return [*self.parameter_names()]

    def _value(self, name: str) -> str:
        value = self.used_parameters.get(name, "")
        if isinstance(value, list):
            value = value[-1] if value else ""
        return str(value)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        # Blank inputs (an emptied form field) mean "no condition", not "equals ''".
        self.used_parameters = {name: value for name, value in self.used_parameters.items() if self._value(name)}
        return super().queryset(request, queryset)

    def choices(self, changelist: Any) -> Any:
        mine = set(self.parameter_names())
        yield {
            "fields": [
                {"name": f"{self.field_path}__{suffix}", "label": label, "type": kind, "value": self._value(name)}
                for (suffix, label, kind), name in zip(self.inputs, self.parameter_names(), strict=True)
            ],
            # Every other active filter, search and ordering travels along; the page number does not.
            "hidden": [
                (key, value)
                for key, values in self.request.GET.lists()
                if key not in mine and key not in ("p", "e")
                for value in values
            ],
            "clear_url": changelist.get_query_string(remove=[*mine, "p"]),
            "active": any(self._value(name) for name in mine),
        }


class ExactFilter(FormFilter):
    inputs = (("exact", "is exactly", "text"),)


class WorkerFilter(ExactFilter):
    title_override = "worker id"


class KindFilter(ExactFilter):
    title_override = "kind"


class TimeRangeFilter(FormFilter):
    """``from`` inclusive, ``before`` exclusive; times are UTC (the admin's time zone)."""

    inputs = (("gte", "from", "datetime-local"), ("lt", "before", "datetime-local"))


class DeadLetterStateFilter(admin.SimpleListFilter):
    """Dead now (the default, like ``GET /queues/{name}/dlq``), replayed since, or both."""

    title = "state"
    parameter_name = "state"
    DEAD, REPLAYED, ALL = "dead", "replayed", "all"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(self.DEAD, "Dead now"), (self.REPLAYED, "Replayed"), (self.ALL, "All")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value() or self.DEAD
        if value == self.DEAD:
            # The same rule as GET /queues/{name}/dlq; the partial index tf_task_dead
            # keeps this join from scanning tf_task for its few dead rows.
            return queryset.filter(task__status="dead")
        if value == self.REPLAYED:
            return queryset.exclude(task__status="dead")
        return queryset

    def choices(self, changelist: Any) -> Any:
        current = self.value() or self.DEAD
        for value, label in self.lookup_choices:
            yield {
                "selected": current == value,
                "query_string": changelist.get_query_string({self.parameter_name: value}, ["p"]),
                "display": label,
            }
