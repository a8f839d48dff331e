"""``PATCH /queues/{name}``: change a queue's settings under its row lock.

The row is re-read ``FOR UPDATE`` and only the fields the request names are
written, so two concurrent PATCHes of different fields both take effect (a
save of the whole cached row would put back the other's old values), and a
PATCH that waited for a concurrent DELETE answers 404 instead of inserting the
queue again (Django's ``save()`` inserts when its UPDATE finds no row).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from rest_framework import serializers as drf_serializers

from queues.errors import QueueNotFound
from queues.models import Queue


def check_delay_bounds(base: int, max_delay: int) -> None:
    if max_delay < base:
        raise drf_serializers.ValidationError(
            {"retry_max_delay_ms": ["Must be greater than or equal to retry_base_ms."]}
        )


def update_queue(name: str, fields: dict[str, Any]) -> tuple[Queue, bool]:
    """Apply ``fields`` to the queue; returns it as saved and whether this change resumed it."""
    with transaction.atomic():
        queue = Queue.objects.select_for_update().filter(name=name).first()
        if queue is None:
            raise QueueNotFound(name)
        was_paused = queue.paused
        for attr, value in fields.items():
            setattr(queue, attr, value)
        check_delay_bounds(queue.retry_base_ms, queue.retry_max_delay_ms)
        queue.save(update_fields=[*fields, "updated_at"])
    return queue, was_paused and not queue.paused
