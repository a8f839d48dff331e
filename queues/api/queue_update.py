"""``PATCH /queues/{name}``: change a queue's settings under its row lock.

The row is re-read ``FOR UPDATE`` and only the fields the request names are
written, so two concurrent PATCHes of different fields both take effect (a
save of the whole cached row would put back the other's old values), and a
PATCH that waited for a concurrent DELETE answers 404 instead of inserting the
queue again (Django's ``save()`` inserts when its UPDATE finds no row).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from rest_framework import serializers as drf_serializers

from queues.errors import QueueNotFound
from queues.models import Queue
from queues.push import secrets


def check_delay_bounds(base: int, max_delay: int) -> None:
    if max_delay < base:
        raise drf_serializers.ValidationError(
            {"retry_max_delay_ms": ["Must be greater than or equal to retry_base_ms."]}
        )


@dataclass(frozen=True)
class QueueUpdate:
    queue: Queue
    #: this change resumed a paused queue (its claimers must be woken)
    resumed: bool
    #: this change made it a push queue: its new secret, answered once
    new_push_secret: str | None


def apply_push(queue: Queue, push: dict[str, Any] | None) -> str | None:
    """Set ``push`` (a pull queue's ``None`` or a push target); returns the secret when one was made.

    A queue that becomes a push queue gets a new secret; one that stays a push queue keeps its
    secret (a new target, same key); one that goes back to pull forgets it.
    """
    was_push = queue.push is not None
    queue.push = None if push is None else {**push, "headers": dict(push["headers"])}
    if push is None:
        secrets.clear(queue)
        return None
    return None if was_push and queue.push_secret else secrets.set_for_new_push(queue)


def update_queue(name: str, fields: dict[str, Any]) -> QueueUpdate:
    """Apply ``fields`` to the queue under its row lock; what changed as :class:`QueueUpdate`."""
    with transaction.atomic():
        queue = Queue.objects.select_for_update().filter(name=name).first()
        if queue is None:
            raise QueueNotFound(name)
        was_paused = queue.paused
        written = [name for name in fields if name != "push"]
        for attr in written:
            setattr(queue, attr, fields[attr])
        new_secret = None
        if "push" in fields:
            new_secret = apply_push(queue, fields["push"])
            written += ["push", "push_secret", "push_previous_secret", "push_secret_rotated_at"]
        check_delay_bounds(queue.retry_base_ms, queue.retry_max_delay_ms)
        queue.save(update_fields=[*written, "updated_at"])
    return QueueUpdate(queue, was_paused and not queue.paused, new_secret)
