"""Path lookups shared by the API views: a malformed or unknown id is a 404."""

from __future__ import annotations

import re
import uuid

from queues.errors import QueueNotFound, TaskNotFound
from queues.models import Queue

# A name that could never have been created is not looked up at all: a NUL byte
# (which Postgres refuses in text) must be a 404, not a database error.
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def queue_or_404(name: str) -> Queue:
    queue = Queue.objects.filter(name=name).first() if _QUEUE_NAME.fullmatch(name) else None
    if queue is None:
        raise QueueNotFound(name)
    return queue


def task_id_or_404(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise TaskNotFound(raw) from None
