"""A push queue's signing secret: set with ``push``, rotated on request, kept for a grace period.

The secret is returned once, in the answer that creates it; the database keeps it readable
because the pusher needs the key itself to compute each HMAC. After a rotation the previous
secret still signs for ``TASKFORGE_PUSH_SECRET_GRACE_SECONDS``, so receivers can switch over
without refusing deliveries in between.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now

from queues.errors import NotAPushQueue, QueueNotFound
from queues.models import Queue

#: 32 random bytes, hex: as strong as the HMAC-SHA256 key can use.
SECRET_BYTES = 32


def new_secret() -> str:
    return secrets.token_hex(SECRET_BYTES)


def set_for_new_push(queue: Queue) -> str:
    """Give a queue that just became a push queue its first secret (no previous one); returns it."""
    queue.push_secret = new_secret()
    queue.push_previous_secret = None
    queue.push_secret_rotated_at = None
    return queue.push_secret


def clear(queue: Queue) -> None:
    """A queue back to pull keeps no secret: switching to push again makes a new one."""
    queue.push_secret = None
    queue.push_previous_secret = None
    queue.push_secret_rotated_at = None


def rotate(name: str) -> tuple[Queue, str]:
    """Replace a push queue's secret under its row lock; the old one signs for the grace period.

    Two rotations at once are serialised by the lock, so the previous secret is always the
    one that signed until this rotation.
    """
    with transaction.atomic():
        queue = Queue.objects.select_for_update().filter(name=name).first()
        if queue is None:
            raise QueueNotFound(name)
        if queue.push is None:
            raise NotAPushQueue(name)
        queue.push_previous_secret = queue.push_secret
        queue.push_secret = new_secret()
        queue.push_secret_rotated_at = Now()  # Postgres' clock, as for leases
        queue.save(update_fields=["push_secret", "push_previous_secret", "push_secret_rotated_at", "updated_at"])
        queue.refresh_from_db(fields=["push_secret_rotated_at", "updated_at"])
    return queue, queue.push_secret


def signing_secrets(current: str, previous: str | None, rotated_at: datetime | None, now: datetime) -> list[str]:
    """The secrets that sign a delivery at ``now``: the current one, and the previous during the grace period."""
    grace = timedelta(seconds=settings.TASKFORGE_PUSH_SECRET_GRACE_SECONDS)
    if previous and rotated_at is not None and now < rotated_at + grace:
        return [current, previous]
    return [current]
