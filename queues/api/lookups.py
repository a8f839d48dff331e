"""Path lookups shared by the API views: a malformed or unknown id is a 404."""

from __future__ import annotations

import re
import uuid
from typing import Any

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from queues.errors import QueueNotFound, TaskNotFound
from queues.models import Queue
from taskforge.infra import rowcache

# (which Postgres refuses in text) must be a 404, not a database error.
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _load_queue(name: str) -> Queue | None:
    return Queue.objects.filter(name=name).first()


# Most requests name a queue; its row changes rarely (see queues.cache).
_queues: rowcache.RowCache[Queue] = rowcache.RowCache(_load_queue)


def queue_or_404(name: str) -> Queue:
    """The queue called ``name``: a private copy the caller may change and save."""
    queue = _queues.get(name) if _QUEUE_NAME.fullmatch(name) else None
    if queue is None:
        raise QueueNotFound(name)
    copy = Queue.__new__(Queue)
    copy.__dict__.update(queue.__getstate__())
    return copy


@receiver(post_save, sender=Queue)
@receiver(post_delete, sender=Queue)
def forget_cached_queues(**kwargs: Any) -> None:
    rowcache.changed()


def task_id_or_404(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise TaskNotFound(raw) from None
