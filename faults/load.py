"""The steady enqueue load: producers that never create a task twice.

Every enqueue carries an idempotency key. When the answer is lost (the API
process died, the connection dropped, a 5xx), the producer sends the same
body with the same key again, to the next API server, until it gets 201 or
200 (an idempotent replay): so a crash between commit and response costs a
retry, never a duplicate. Only answered enqueues count as accepted; the
checker requires every accepted task to finish.

About one task in ``fail_every`` carries ``fail: true`` and fails every
attempt, to exercise retries and the dead-letter queue (``fail_every=None``:
none does, every task must end ``done``).
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

RETRY_PAUSE_SECONDS = 0.2


@dataclass
class Accepted:
    task_id: str
    key: str
    failing: bool
    attempts: int  # HTTP attempts it took to get an answer
    at: float  # wall time of the answer


@dataclass
class Producer:
    """``threads`` producers enqueueing ``rate`` tasks per second in total into ``queue``."""

    apis: Callable[[], list[str]]
    api_key: str
    queue: str
    rate: float = 20.0
    threads: int = 4
    fail_every: int | None = 25
    sleep_ms: tuple[int, int] = (50, 300)
    accepted: list[Accepted] = field(default_factory=list)
    given_up: list[str] = field(default_factory=list)
    retried: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _drain_deadline: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _seq: itertools.count = field(default_factory=itertools.count)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for n in range(self.threads):
            thread = threading.Thread(target=self._run, args=(n,), name=f"producer-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, drain_seconds: float = 30.0) -> None:
        """Stop new enqueues; an enqueue still unanswered keeps retrying up to ``drain_seconds``."""
        self._drain_deadline = time.monotonic() + drain_seconds
        self._stop.set()
        for thread in self._threads:
            thread.join(drain_seconds + 10)

    def _run(self, number: int) -> None:
        interval = self.threads / self.rate
        next_at = time.monotonic() + number * interval / self.threads
        with httpx.Client(headers={"Authorization": f"Bearer {self.api_key}"}, timeout=5) as http:
            while not self._stop.is_set():
                delay = next_at - time.monotonic()
                if delay > 0:
                    self._stop.wait(delay)
                    continue
                next_at += interval
                self._enqueue_once(http, next(self._seq))

    def _body(self, seq: int) -> tuple[str, dict]:
        key = f"{self.queue}-{seq}-{uuid.uuid4().hex[:8]}"
        failing = self.fail_every is not None and seq % self.fail_every == self.fail_every - 1
        low, high = self.sleep_ms
        payload = {"seq": seq, "sleep_ms": low + (seq * 7919) % (high - low + 1), "fail": failing}
        return key, {"payload": payload, "idempotency_key": key}

    def _enqueue_once(self, http: httpx.Client, seq: int) -> None:
        key, body = self._body(seq)
        for attempt in itertools.count(1):
            urls = self.apis()
            url = urls[(seq + attempt) % len(urls)] if urls else None
            if url is not None:
                try:
                    response = http.post(f"{url}/queues/{self.queue}/tasks", json=body)
                    if response.status_code in (200, 201):
                        with self._lock:
                            self.accepted.append(
                                Accepted(response.json()["id"], key, body["payload"]["fail"], attempt, time.time())
                            )
                        return
                    if 400 <= response.status_code < 500 and response.status_code != 409:
                        raise RuntimeError(f"enqueue refused: {response.status_code} {response.text}")
                except httpx.HTTPError:
                    pass  # no answer: the task may or may not exist; the key makes the retry safe
            with self._lock:
                self.retried += 1
            if self._stop.is_set() and time.monotonic() > self._drain_deadline:
                with self._lock:
                    self.given_up.append(key)
                return
            time.sleep(RETRY_PAUSE_SECONDS)


def create_queue(api_url: str, admin_key: str, name: str, **settings: object) -> None:
    body = {"name": name, "max_retries": 3, "retry_base_ms": 100, "retry_max_delay_ms": 1000, **settings}
    response = httpx.post(f"{api_url}/queues", json=body, headers={"Authorization": f"Bearer {admin_key}"}, timeout=10)
    if response.status_code != 201:
        raise RuntimeError(f"could not create queue {name}: {response.status_code} {response.text}")


def probe(
    apis: Callable[[], list[str]], api_key: str, queue: str, timeout: float = 60.0
) -> tuple[str, float | None] | None:
    """Enqueue one urgent task and wait until it is done: (task id, seconds taken or None), or None.

    Measures how long after a fault fresh work flows end to end again.
    """
    started = time.monotonic()
    key = f"probe-{uuid.uuid4().hex}"
    body = {"payload": {"probe": True, "sleep_ms": 10}, "priority": 1, "idempotency_key": key}
    headers = {"Authorization": f"Bearer {api_key}"}
    task_id = None
    with httpx.Client(headers=headers, timeout=5) as http:
        while time.monotonic() - started < timeout:
            urls = apis()
            if not urls:
                time.sleep(0.1)
                continue
            url = urls[int(time.monotonic() * 10) % len(urls)]
            try:
                if task_id is None:
                    response = http.post(f"{url}/queues/{queue}/tasks", json=body)
                    if response.status_code in (200, 201):
                        task_id = response.json()["id"]
                else:
                    response = http.get(f"{url}/queues/{queue}/tasks/{task_id}")
                    if response.status_code == 200 and response.json()["status"] == "done":
                        return task_id, time.monotonic() - started
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
    return None if task_id is None else (task_id, None)
