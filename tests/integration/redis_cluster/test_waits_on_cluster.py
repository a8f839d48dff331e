# ruff: noqa: F401  (the imported tests and fixtures are what pytest collects here)
"""Long polls, waits for a result and delayed tasks, their own tests run unchanged against a Redis Cluster.

As in ``test_api_on_cluster``: the tests are imported from their modules and
collected here under this directory's fixtures, so the doorbell they wait on is
the Cluster's sharded pub/sub, and the scheduler's sets and Lua moves live on the
Cluster's nodes. These tests commit (``transaction=True``), as in their modules.
"""

from __future__ import annotations

import pytest

from tests.integration.api.test_task_results import (
    producer_key,
    test_a_cancel_ends_the_wait,
    test_a_last_nack_ends_the_wait_dead_and_a_retry_does_not,
    test_an_ack_ends_the_wait_with_the_result,
    test_many_waiters_on_one_task_are_all_woken_and_others_are_not,
)
from tests.integration.queues.test_scheduler import (
    test_a_flush_is_rebuilt_by_the_next_slow_tick,
    test_a_retry_is_promoted_when_its_time_comes,
    test_delayed_tasks_are_claimed_within_a_second_of_their_time,
    test_slow_tick_loads_what_is_due_within_the_horizon,
    test_slow_tick_promotes_due_retries_into_the_lane,
    test_two_schedulers_move_each_entry_once,
)
from tests.integration.workers.test_long_poll import (
    test_a_claim_without_queue_is_woken_by_any_queue,
    test_a_delayed_task_becoming_due_ends_the_wait,
    test_a_replay_ends_the_wait,
    test_an_enqueue_ends_the_wait_at_once,
    test_resuming_a_paused_queue_ends_the_wait,
    worker_key,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.xdist_group("redis_cluster")]
