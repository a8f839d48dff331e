"""The API and the loops behind PgBouncer in transaction pool mode.

In transaction mode consecutive transactions of one client run on different
server connections, so nothing may outlive a transaction: no server-side
prepared statement (PgBouncer < 1.21), no ``SET`` outside a transaction, and PgBouncer
refuses the ``options`` startup parameter outright. ``TASKFORGE_DB_PGBOUNCER``
makes TaskForge connect the way PgBouncer accepts.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from queues.apikeys import create_key
from queues.models import Task

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROUNDS = 12  # more than psycopg's prepare_threshold (5): a statement prepared once would be reused


def test_api_and_loops_work_through_transaction_pooling(live_stack, pgbouncer):
    _, key = create_key("bouncer-admin", "admin")
    env = {"DATABASE_URL": pgbouncer.database_url(), "TASKFORGE_DB_PGBOUNCER": "true"}
    url = live_stack.start_api(workers=2, extra_env=env)
    loops = [live_stack.start_loop(name, extra_env=env) for name in ("run_dispatcher", "run_scheduler", "run_watchdog")]
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:

        def post(path: str, body: dict[str, Any], status: int = 200) -> Any:
            response = client.post(path, json=body)
            assert response.status_code == status, (path, response.status_code, response.text, pgbouncer.log())
            return response.json()

        post("/queues", {"name": "bounced", "max_retries": 0}, 201)
        for round_ in range(ROUNDS):
            first = post("/queues/bounced/tasks", {"payload": {"r": round_}, "idempotency_key": f"k{round_}"}, 201)
            replay = post("/queues/bounced/tasks", {"payload": {"r": round_}, "idempotency_key": f"k{round_}"}, 200)
            assert replay["id"] == first["id"]
            batch = post("/queues/bounced/tasks/batch", {"tasks": [{"payload": {"b": i}} for i in range(3)]}, 201)
            claimed = post("/workers/claim", {"worker_id": "w", "queue": "bounced", "max_tasks": 10})["tasks"]
            assert {t["id"] for t in claimed} == {first["id"], *(t["id"] for t in batch["tasks"])}
            by_id = {t["id"]: t for t in claimed}
            lease = {"worker_id": "w", "task_id": first["id"], "lease_token": by_id.pop(first["id"])["lease_token"]}
            post("/workers/heartbeat", lease)
            assert post("/workers/ack", {**lease, "result": {"ok": True}})["status"] == "done"
            items = [{"task_id": t["id"], "lease_token": t["lease_token"]} for t in by_id.values()]
            acked = post("/workers/ack/batch", {"worker_id": "w", "items": items[:2]})["results"]
            assert [r["status"] for r in acked] == ["done", "done"]
            [dead] = post(
                "/workers/nack/batch", {"worker_id": "w", "items": [{**items[2], "error": "boom", "retry": False}]}
            )["results"]
            assert dead["status"] == "dead"
            assert post(f"/queues/bounced/dlq/{dead['task_id']}/replay", {})["status"] == "pending"
            [again] = post("/workers/claim", {"worker_id": "w", "queue": "bounced"})["tasks"]
            assert again["id"] == dead["task_id"]
            post(
                "/workers/nack",
                {"worker_id": "w", "task_id": again["id"], "lease_token": again["lease_token"], "error": "x"},
            )
            assert post("/queues/bounced/dlq/replay", {"all": True})["replayed"] == 1
            [third] = post("/workers/claim", {"worker_id": "w", "queue": "bounced"})["tasks"]
            post("/workers/ack", {"worker_id": "w", "task_id": third["id"], "lease_token": third["lease_token"]})

        # Single enqueues without a key run on each API process's event loop, on its own pool: through
        # PgBouncer too (no prepared statements, no startup options).
        plain = {post("/queues/bounced/tasks", {"payload": {"plain": n}}, 201)["id"] for n in range(ROUNDS * 4)}
        claimed = post("/workers/claim", {"worker_id": "w", "queue": "bounced", "max_tasks": 100})["tasks"]
        assert {t["id"] for t in claimed} == plain
        items = [{"task_id": t["id"], "lease_token": t["lease_token"]} for t in claimed]
        acked = post("/workers/ack/batch", {"worker_id": "w", "items": items})["results"]
        assert {r["status"] for r in acked} == {"done"}

        # A long poll waits without a database connection and wakes for a task enqueued meanwhile.
        woken: list[Any] = []
        waiter = threading.Thread(
            target=lambda: woken.append(
                post("/workers/claim", {"worker_id": "w", "queue": "bounced", "wait_seconds": 20})
            )
        )
        waiter.start()
        late = post("/queues/bounced/tasks", {"payload": {"late": True}}, 201)
        waiter.join(30)
        assert [t["id"] for t in woken[0]["tasks"]] == [late["id"]]
        post(
            "/workers/ack",
            {"worker_id": "w", "task_id": late["id"], "lease_token": woken[0]["tasks"][0]["lease_token"]},
        )
        # A delayed task becomes claimable through the scheduler, which also runs behind PgBouncer.
        due = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
        delayed = post("/queues/bounced/tasks", {"payload": {}, "scheduled_at": due}, 201)
        claimed = post("/workers/claim", {"worker_id": "w", "queue": "bounced", "wait_seconds": 20})["tasks"]
        assert [t["id"] for t in claimed] == [delayed["id"]]
        post("/workers/ack", {"worker_id": "w", "task_id": delayed["id"], "lease_token": claimed[0]["lease_token"]})
        assert client.get("/readyz").status_code == 200
        stats = client.get("/queues/bounced/stats").json()
        assert stats["depth"]["done"] == ROUNDS * 4 + 2 + len(plain)

    assert Task.objects.filter(queue__name="bounced", status="done").count() == ROUNDS * 4 + 2 + len(plain)
    assert [loop.poll() for loop in loops] == [None, None, None], live_stack.output()
    assert "prepared statement" not in live_stack.output()
    assert '"level":"ERROR"' not in live_stack.output(), live_stack.output()
