"""Path lookups shared by the API views: a malformed or unknown id is a 404."""

from __future__ import annotations

import uuid

from queues.errors import QueueNotFound, TaskNotFound
from queues.models import Queue


def queue_or_404(name: str) -> Queue:
    queue = Queue.objects.filter(name=name).first() if len(name) <= 64 else None
    if queue is None:
        raise QueueNotFound(name)
    return queue


def task_id_or_404(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise TaskNotFound(raw) from None
