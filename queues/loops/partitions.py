"""The history's partitions, kept by the watchdog: days created ahead, days past retention dropped.

One round (``queues.partitions.maintain``) reads the catalog and, most of the
time, finds nothing to do. Retention is ``TASKFORGE_RETENTION_DAYS``, the one
that prunes finished tasks: a day of history goes once all of it is older.
A round that fails (a lock it waited for too long, a race with another
watchdog's round) is logged and tried again at the next one; the partitions
always cover now and the days ahead, so nothing waits on it.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import DatabaseError

from queues.partitions import maintain

logger = logging.getLogger("taskforge.loops.partitions")


def run_once() -> maintain.Round | None:
    """One maintenance round; None when it failed (logged)."""
    try:
        done = maintain.run_round(retention_days=settings.TASKFORGE_RETENTION_DAYS)
    except DatabaseError as exc:
        logger.warning(
            "history partitions not maintained this round: %s",
            exc,
            extra={"event": "partitions.failed", "error": str(exc)},
        )
        return None
    if done.bounded:
        logger.warning(
            "the open-ended history partition held events (today's, if the watchdog had stopped for days); "
            "bounded as %s",
            done.bounded,
            extra={"event": "partitions.bounded", "partition": done.bounded},
        )
    if done.created:
        logger.info(
            "created %d history partition(s)",
            len(done.created),
            extra={"event": "partitions.created", "partitions": list(done.created)},
        )
    if done.dropped:
        logger.info(
            "dropped %d history partition(s)",
            len(done.dropped),
            extra={"event": "partitions.dropped", "partitions": list(done.dropped), "moved_back": done.moved_back},
        )
    return done
