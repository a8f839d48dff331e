# ruff: noqa: F403  (the imported tests and fixtures are what pytest collects here)
"""The acceptance tests of the task protocol, run unchanged against a Redis Cluster.

The tests are the API's own (imported from their modules, collected here again
under this directory's fixtures): every Redis user of this process, and of any
server a test starts, talks to the Cluster. After-commit work runs at once, as
in the dispatch tests, so each enqueue, claim, ack and nack really goes through
the lanes, the token buckets and the doorbell (a test transaction never commits).

Queue names hash to different primaries (``email_jobs``, ``limited``, ``free``,
``other``: see ``test_the_queues_used_here_live_on_different_primaries``), so the
cross-queue claims below read lanes on several nodes in one pipeline.
"""

from __future__ import annotations

import pytest

from queues.dispatch import lanes
from tests.integration.acceptance import *

pytestmark = [pytest.mark.django_db, pytest.mark.xdist_group("redis_cluster")]


def test_the_queues_used_here_live_on_different_primaries(redis_cluster):
    primaries = {redis_cluster.primary_for(lanes.ready_key(name)) for name in ("email_jobs", "limited", "free")}

    assert len(primaries) >= 2, "the cross-queue tests would read one node only"
