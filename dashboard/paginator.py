"""A changelist paginator that never counts a million rows.

Django's changelist asks its paginator for ``count`` on every page view; on
``tf_task`` an exact ``COUNT(*)`` reads the whole table (or a whole index) each
time. Instead:

* no filter at all: Postgres' own estimate, ``pg_class.reltuples`` (kept fresh
  by autovacuum/ANALYZE);
* filtered: the planner's estimate for the filtered query (``EXPLAIN``, no
  rows read); when it is small, an exact count capped at ``EXACT_UP_TO`` rows
  (``SELECT count(*) FROM (... LIMIT n)`` stops early), so short lists show
  exact numbers and long ones "about N".

Counts above the cap are shown as estimates; a page past the real end is
simply empty instead of an error.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import orjson
from django.core.exceptions import EmptyResultSet
from django.core.paginator import EmptyPage, Paginator
from django.db import connections
from django.db.models import QuerySet

EXACT_UP_TO = 1_000
# Above this planner estimate the filtered count is not even attempted.
CLEARLY_MORE = 10 * EXACT_UP_TO


def table_estimate(model: Any, using: str = "default") -> int:
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass", [model._meta.db_table])
        row = cursor.fetchone()
    # -1 means "never analysed" (Postgres 14+): fall back to a capped count.
    return int(row[0]) if row and row[0] is not None else -1


def planner_estimate(queryset: QuerySet[Any]) -> int:
    try:
        sql, params = queryset.query.sql_with_params()
    except EmptyResultSet:  # e.g. ``pk__in=[]``: Django knows without asking
        return 0
    with connections[queryset.db].cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        (plan,) = cursor.fetchone()
    if isinstance(plan, (str, bytes)):
        plan = orjson.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


class EstimatedCountPaginator(Paginator):
    # Set by ``count``: True when the number shown is Postgres' estimate.
    estimated = False

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            return len(queryset)
        if not queryset.query.where:
            estimate = table_estimate(queryset.model, queryset.db)
            if estimate > EXACT_UP_TO:
                self.estimated = True
                return estimate
        estimate = planner_estimate(queryset.order_by())
        if estimate > CLEARLY_MORE:
            # Even a capped count would read thousands of rows to say "many".
            self.estimated = True
            return estimate
        capped = queryset.order_by()[: EXACT_UP_TO + 1].count()
        if capped <= EXACT_UP_TO:
            return capped
        self.estimated = True
        return max(estimate, capped)

    def validate_number(self, number: Any) -> int:
        if not self.estimated:
            return super().validate_number(number)
        # With an estimate the last pages may not exist: show them empty rather than fail.
        try:
            return super().validate_number(number)
        except EmptyPage:
            number = int(number)
            if number < 1:
                raise
            return number
