"""Two real scheduler processes against one database, one of them SIGKILLed and restarted twice.

An every-second schedule and a cron with seconds (``* * * * * *``) must yield
exactly one task per fire time, none missing, over the whole window, whatever
process fired it and however the kills fell (mid-transaction included).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest

from queues.api.schedule_changes import create_schedule
from queues.models import Schedule, Task
from queues.schedules import planning
from taskforge.dev import launcher
from tests.factories import QueueFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

#: How long the schedules run, in seconds, and when the second process is killed and restarted.
RUN_SECONDS = 60
KILLS = ((12, 17), (35, 40))


def _fire_times(name: str) -> list[datetime]:
    prefix = f"schedule:{name}:"
    found = Task.objects.filter(idempotency_key__startswith=prefix).values_list("idempotency_key", flat=True)
    return sorted(datetime.fromisoformat(key.removeprefix(prefix).replace("Z", "+00:00")) for key in found)


def test_two_schedulers_with_kills_and_restarts_fire_each_time_exactly_once(live_stack):
    QueueFactory(name="ticks")
    names = ("every-second", "cron-seconds")
    create_schedule({"name": names[0], "queue": "ticks", "every_seconds": 1, "catch_up": "none"})
    create_schedule({"name": names[1], "queue": "ticks", "cron": "* * * * * *", "catch_up": "none"})
    first = {s.name: s.next_run_at for s in Schedule.objects.all()}

    steady = live_stack.start_loop("run_scheduler")
    victim = live_stack.start_loop("run_schedules")
    started = time.monotonic()
    for kill_at, restart_at in KILLS:
        time.sleep(max(0.0, started + kill_at - time.monotonic()))
        assert victim.poll() is None, live_stack.output()
        launcher.kill(victim)
        time.sleep(max(0.0, started + restart_at - time.monotonic()))
        victim = live_stack.start_loop("run_schedules")
    time.sleep(max(0.0, started + RUN_SECONDS - time.monotonic()))
    assert steady.poll() is None and victim.poll() is None, live_stack.output()
    # Pausing ends the window: nothing fires after it (next_run_at null), and the last fire is known.
    Schedule.objects.update(paused=True, next_run_at=None)
    until = planning.database_now()
    # Both loops stop on SIGTERM with exit code 0 (the restarted one included).
    assert launcher.terminate_all([steady, victim], grace=15) == [0, 0], live_stack.output()

    for name in names:
        fires = _fire_times(name)
        assert fires, live_stack.output()
        # Every second from the first planned fire to the last one, each once.
        expected = [
            first[name] + timedelta(seconds=i) for i in range(int((fires[-1] - first[name]).total_seconds()) + 1)
        ]
        assert fires == expected, (name, sorted(set(expected) - set(fires)), live_stack.output()[-3000:])
        # The window really ran to the end (the last fire a few ticks at most before the pause).
        assert until - fires[-1] <= timedelta(seconds=5), (name, until, fires[-1])
        assert len(fires) >= RUN_SECONDS - 5
    assert Task.objects.count() == sum(len(_fire_times(name)) for name in names)
