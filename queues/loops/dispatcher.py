"""The dispatcher: keep every unpaused queue's Redis lane filled from Postgres.

Claims take their candidates from the lanes (``queues.dispatch.claiming``);
announces after each commit add new tasks at once, and this loop re-derives
what they missed (a Redis blip, a flush, a trimmed lane) within a tick.
"""

from __future__ import annotations

import logging

import redis
from django.db import connection

from queues.dispatch import doorbell, lanes
from queues.models import Queue
from taskforge.infra.redis import redis_client

logger = logging.getLogger("taskforge.loops.dispatcher")

#: Ids re-read per queue each tick even when the lane is full, so a task that missed its
#: lane (Redis blip, trimmed) still overtakes lower priorities within a tick.
HEAD_REFRESH = 20

# The best due pending tasks of each queue, at most ``lim`` per queue: an
# ordered range scan of the partial index tf_task_ready per queue, never a
# copy of the table.
_READY_HEADS = """
SELECT w.name, t.id, t.priority, t.scheduled_at
FROM unnest(%(queue_ids)s::uuid[], %(names)s::text[], %(limits)s::int[]) AS w(queue_id, name, lim)
CROSS JOIN LATERAL (
    SELECT t.id, t.priority, t.scheduled_at
    FROM tf_task t
    WHERE t.queue_id = w.queue_id AND t.status = 'pending' AND t.scheduled_at <= now()
    ORDER BY t.priority, t.scheduled_at
    LIMIT w.lim
) t
"""


def refill_lanes() -> int:
    """Top up the lane of every unpaused queue; return how many ids were new.

    1. Lanes below the low-water mark are filled up to their capacity; the
       others get their head re-read (a task that missed its lane overtakes
       lower priorities within a tick).
    2. ``ZADD`` is idempotent, so two dispatchers, or a dispatcher racing an
       announce, only rewrite the same scores. Ids claimed meanwhile are
       garbage a claim drops.
    3. A queue whose lane gained ids rings its doorbell.
    """
    queues = list(Queue.objects.filter(paused=False).values_list("id", "name", "push"))
    if not queues:
        return 0
    names = [name for _, name, _ in queues]
    push_queues = {name for _, name, push in queues if push is not None}
    limits = [lanes.LANE_CAPACITY if size < lanes.LANE_LOW_WATER else HEAD_REFRESH for size in lanes.sizes(names)]
    with connection.cursor() as cursor:
        cursor.execute(_READY_HEADS, {"queue_ids": [qid for qid, _, _ in queues], "names": names, "limits": limits})
        found = cursor.fetchall()
    entries: dict[str, dict[str, int]] = {}
    for name, task_id, priority, scheduled_at in found:
        entries.setdefault(name, {})[str(task_id)] = lanes.lane_score(priority, scheduled_at)
    if not entries:
        return 0
    pipe = redis_client().pipeline(transaction=False)
    for name, ids in entries.items():
        lanes.add_ready(pipe, name, ids)
    results = pipe.execute()
    added_total = 0
    for name, added in zip(entries, results[0::2], strict=True):
        if added:
            added_total += int(added)
            doorbell.ring(name, int(added), push=name in push_queues)
    return added_total


def run_once() -> int:
    """One dispatcher tick: the lanes refilled; how many ids were new (0 while Redis is down)."""
    try:
        return refill_lanes()
    except redis.RedisError as exc:
        # Not an error to back off from: claims use Postgres meanwhile, and the lanes must
        # be rebuilt within a tick of Redis coming back.
        logger.warning("redis unavailable: lanes not refilled: %s", exc, extra={"event": "dispatch.redis_down"})
        return 0
