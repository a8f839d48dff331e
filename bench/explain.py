"""EXPLAIN (ANALYZE, BUFFERS) of the claim and stats queries, as TaskForge runs them.

Run with the project's interpreter against the bench database:
``python -m bench.explain QUEUE``. It imports the statements from the
project itself (so it explains what is deployed), runs each inside a
transaction that is rolled back (a claim moves rows), and prints JSON.
"""

from __future__ import annotations

import json
import os
import sys


def main(queue_name: str) -> dict[str, str]:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "taskforge.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection, transaction

    from queues.lifecycle import claim_statements
    from queues.models import Queue
    from queues.telemetry import stats

    queue = Queue.objects.get(name=queue_name)
    plans: dict[str, str] = {}
    to_explain: list[tuple[str, str, dict]] = []
    params = {
        "queue_ids": [queue.id],
        "task_ids": [],
        "limit": 50,
        "worker_id": "explain",
        "lease_seconds": settings.TASKFORGE_HEARTBEAT_TIMEOUT,
        "event_kind": "transition",
    }
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM tf_task WHERE queue_id = %s AND status = 'pending' LIMIT 50", [queue.id])
        ids = [row[0] for row in cursor.fetchall()]
    params["queue_id"] = queue.id
    to_explain.append(("claim 50, Postgres fallback (ordered scan)", claim_statements.CLAIM_FROM_ONE_QUEUE, params))
    by_id = {**params, "task_ids": ids}
    to_explain.append(
        ("claim 50 by id (ids from the Redis lanes)", claim_statements.CLAIM_BY_IDS_FROM_ONE_QUEUE, by_id)
    )
    to_explain.append(("claim 50 from any queue, Postgres fallback", claim_statements.CLAIM_FROM_QUEUES, params))
    for name in ("_DEPTHS", "_ACTIVE", "_FINISHED", "_RATES"):
        sql = getattr(stats, name, None)
        if sql:
            params = {
                "queue_ids": [queue.id],
                "window": getattr(stats, "RATE_WINDOW_SECONDS", 60),
                "statuses": ["pending", "claimed", "executing", "retry", "dead"],
                "cap": getattr(stats, "FINISHED_EXACT_UP_TO", 10_000),
            }
            to_explain.append((f"stats {name.strip('_').lower()}", sql, params))
    for label, sql, params in to_explain:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS, TIMING ON) " + sql, params)
                plans[label] = "\n".join(row[0] for row in cursor.fetchall())
                transaction.set_rollback(True)
        except Exception as exc:  # a changed statement is reported, not fatal
            plans[label] = f"could not EXPLAIN: {exc!r}"
    return plans


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
