# ruff: noqa: F401  (the imported tests and fixtures are what pytest collects here)
"""Counters, caches, throttles and semaphores, their own tests run unchanged against a Redis Cluster.

As in ``test_api_on_cluster``: the tests are imported from their modules and
collected here under this directory's fixtures. Between them they cover every
Redis key that carries no queue: the metrics hashes (one MULTI on their
``{metrics}`` slot), the key and queue caches' generation counter, the login
throttle, the dashboard's shared snapshot and lock, and Django's cache (sessions);
and the push semaphore's two-key Lua scripts on a queue's slot.
"""

from __future__ import annotations

import pytest

from tests.integration.dashboard.test_snapshot import (
    test_a_new_tick_computes_again,
    test_the_snapshot_is_computed_once_per_tick_across_processes,
    test_while_another_process_computes_the_last_published_snapshot_is_served,
)
from tests.integration.observability.test_metrics import (
    fresh_outbox,
    run_on_commit,
    test_counters_and_histogram_follow_every_kind_of_finish,
    test_counters_live_in_redis_not_in_the_process,
    test_finished_depth_is_recounted_at_most_every_30_seconds,
)
from tests.integration.queues.test_apikey_cache import (
    empty_cache,
    test_a_revocation_by_another_process_takes_effect_at_once,
    test_revoking_in_this_process_takes_effect_at_once,
)
from tests.integration.queues.test_push_semaphore import (
    test_after_a_redis_loss_holders_re_add_their_slots_before_any_is_handed_out,
    test_slots_stop_at_the_limit_and_come_back_when_released,
)
from tests.integration.queues.test_queue_cache import (
    test_a_pause_by_another_process_stops_claims_at_once,
    test_new_settings_from_another_process_apply_to_the_next_enqueue,
)
from tests.integration.security.test_login_throttle import (
    fast_hasher,
    staff,
    test_five_failures_lock_the_username_and_address_with_a_clear_message,
    test_the_throttle_is_shared_through_redis,
)
from tests.integration.security.test_sessions import test_a_redis_flush_does_not_log_an_admin_out

pytestmark = [pytest.mark.django_db, pytest.mark.xdist_group("redis_cluster")]
