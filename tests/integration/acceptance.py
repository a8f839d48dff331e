# ruff: noqa: F401  (the imported tests and fixtures are what pytest collects where this is imported)
"""The acceptance tests of the task protocol, gathered to run again against another Redis.

Each engine's directory (``redis_cluster``, ``sentinel``) imports these with
``from tests.integration.acceptance import *`` under fixtures that point every
Redis user of the process (and of the servers a test starts) at that engine.
The tests are the API's own, unchanged: enqueue, claim, long polls, heartbeat,
ack, nack, batches, priorities, delayed tasks, rate limits and DLQ replay.
After-commit work runs at once, as in the dispatch tests, so each move really
goes through the lanes, the token buckets and the doorbell.
"""

from __future__ import annotations

from tests.integration.api.test_dlq_api import (
    test_bulk_replay_all,
    test_replay_puts_the_same_task_back_to_pending,
    test_second_death_shows_again_and_keeps_replay_count,
)
from tests.integration.api.test_task_flow import (
    test_ack_by_another_worker_is_lease_lost,
    test_enqueue_claim_heartbeat_ack,
    test_nack_until_dead_then_replay,
    test_repeated_ack_is_idempotent,
)
from tests.integration.api.test_workers_api import (
    test_ack_batch_judges_each_item_alone,
    test_claim_leases_the_task,
    test_claim_long_poll_returns_at_once_when_tasks_are_there,
    test_claim_long_poll_returns_empty_when_the_wait_is_over,
    test_claim_max_tasks,
    test_claim_order_priority_then_oldest,
    test_first_heartbeat_moves_claimed_to_executing,
    test_heartbeat_extends_a_lease_about_to_expire,
    test_nack_batch_judges_each_item_alone,
    test_nack_retry_false_is_dead_at_once,
    test_nack_schedules_a_retry_with_backoff,
)
from tests.integration.queues.test_dispatch import (  # with its fixtures (two of them autouse here too)
    after_commit_runs_at_once,
    redis_breaker_closed,
    small_lanes,
    test_a_claimed_id_left_in_the_lane_is_never_claimed_twice,
    test_claim_falls_back_to_postgres_when_the_lane_is_empty,
    test_claim_without_queue_takes_lowest_priority_number_across_queues,
    test_delayed_task_is_not_in_the_lane_and_not_claimable_early,
    test_deleting_a_queue_drops_its_redis_keys,
    test_garbage_ids_in_the_lane_are_ignored_and_dropped,
    test_refill_tops_up_below_the_low_water_mark,
    test_strict_priority_order_over_all_ten_priorities,
)
from tests.integration.queues.test_ratelimit import (
    test_a_claim_that_finds_fewer_tasks_returns_its_tokens,
    test_bucket_refills_at_the_rate_by_redis_time,
    test_claim_without_queue_respects_each_queues_limit,
    test_claim_without_queue_respects_limits_in_the_postgres_fallback,
    test_claims_dispatch_at_most_the_burst_then_wait_for_tokens,
    test_rate_limit_holds_across_three_api_processes,
)
