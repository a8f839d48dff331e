"""Time the dashboard's pages with a million tasks (not part of the test suite).

Seeds the database named by DATABASE_URL (use a scratch one: it adds rows
directly, as test set-up does) with ``--tasks`` rows via ``generate_series``,
then requests each page through Django's test client as a logged-in superuser
and prints the median of ``--runs`` requests::

    DATABASE_URL=postgres://.../scratch REDIS_URL=redis://... DJANGO_SECRET_KEY=x \
        python -m tests.integration.dashboard.measure_changelists --tasks 1000000

``--no-seed`` re-measures without inserting again.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

SEED = """
SET statement_timeout = 0;
INSERT INTO tf_queue (id, name, max_retries, paused, retry_base_ms, retry_max_delay_ms, created_at, updated_at)
SELECT gen_random_uuid(), 'scale_' || q, 3, false, 1000, 3600000, now(), now()
FROM generate_series(1, %(queues)s) q
ON CONFLICT (name) DO NOTHING;

WITH queues AS (
    SELECT array_agg(id ORDER BY name) AS ids FROM tf_queue WHERE name LIKE 'scale\\_%%'
), rows AS (
    SELECT n, random() AS r, now() - (random() * interval '7 days') AS created
    FROM generate_series(1, %(tasks)s) n
)
INSERT INTO tf_task (id, queue_id, payload, status, priority, scheduled_at, created_at, updated_at,
                     status_changed_at, claimed_at, claimed_by, attempts, max_retries, last_error,
                     finished_at, idempotency_key)
SELECT gen_random_uuid(),
       (SELECT ids[1 + n %% array_length(ids, 1)] FROM queues),
       jsonb_build_object('user_id', n, 'template', 'welcome', 'padding', repeat('x', 100)),
       s.status, 1 + n %% 10, rows.created, rows.created, rows.created, rows.created,
       CASE WHEN s.status IN ('done', 'executing', 'dead') THEN rows.created END,
       CASE WHEN s.status IN ('done', 'executing', 'dead') THEN 'worker-' || (n %% 50) END,
       CASE WHEN s.status = 'pending' THEN 0 ELSE 1 END, 3,
       CASE WHEN s.status IN ('dead', 'retry') THEN 'Traceback: ValueError ' || n END,
       CASE WHEN s.status IN ('done', 'cancelled') THEN rows.created END,
       CASE WHEN n %% 10 = 0 THEN 'key-' || n END
FROM rows CROSS JOIN LATERAL (
    SELECT CASE WHEN rows.r < 0.90 THEN 'done' WHEN rows.r < 0.94 THEN 'pending' WHEN rows.r < 0.95 THEN 'retry'
                WHEN rows.r < 0.97 THEN 'dead' WHEN rows.r < 0.99 THEN 'cancelled' ELSE 'executing' END AS status
) s;

INSERT INTO tf_dead_letter (id, queue_id, payload, last_error, attempts, died_at, replay_count)
SELECT t.id, t.queue_id, t.payload, t.last_error, t.attempts, t.updated_at, 0
FROM tf_task t LEFT JOIN tf_dead_letter d ON d.id = t.id
WHERE t.status = 'dead' AND d.id IS NULL;

ANALYZE tf_task;
ANALYZE tf_dead_letter;
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--no-seed", action="store_true")
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "taskforge.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from queues.models import Queue, Task

    if not args.no_seed:
        started = time.monotonic()
        with connection.cursor() as cursor:
            cursor.execute(SEED, {"tasks": args.tasks, "queues": args.queues})
        print(f"seeded {args.tasks} tasks in {time.monotonic() - started:.1f} s")
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM tf_task")
        print(f"tf_task rows: {cursor.fetchone()[0]}")

    user = get_user_model().objects.filter(username="measure").first() or get_user_model().objects.create_superuser(
        "measure", "measure@example.com", "measure"
    )
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)
    queue = Queue.objects.filter(name__startswith="scale_").order_by("name").first()
    some_task = Task.objects.filter(queue=queue).only("id").first()
    pages = {
        "overview /admin/": "/admin/",
        "tasks, no filter": "/admin/queues/task/",
        "tasks, page 100": "/admin/queues/task/?p=100",
        "tasks, one queue": f"/admin/queues/task/?queue__id__exact={queue.id}",
        "tasks, queue + status=dead": f"/admin/queues/task/?queue__id__exact={queue.id}&status__exact=dead",
        "tasks, status=pending": "/admin/queues/task/?status__exact=pending",
        "tasks, worker id": "/admin/queues/task/?claimed_by__exact=worker-7",
        "tasks, created in last hour": "/admin/queues/task/?created_at__gte="
        + time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 3600)),
        "tasks, search by id": f"/admin/queues/task/?q={some_task.id}",
        "tasks, search by idempotency key": "/admin/queues/task/?q=key-5000",
        "task detail": f"/admin/queues/task/{some_task.id}/change/",
        "dead letters": "/admin/queues/deadlettertask/",
        "dead letters, one queue": f"/admin/queues/deadlettertask/?queue__id__exact={queue.id}",
        "workers": "/admin/workers/",
    }
    print(f"{'page':40} {'median ms':>10} {'max ms':>8} {'queries':>8}")
    for name, url in pages.items():
        timings = []
        for _ in range(args.runs):
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                response = client.get(url)
                timings.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (url, response.status_code)
        print(f"{name:40} {statistics.median(timings):10.0f} {max(timings):8.0f} {len(queries):8d}")


if __name__ == "__main__":
    main()
