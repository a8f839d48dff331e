"""The Django tasks backend's own decisions: priority mapping and its system check.

Enqueueing through it and running the tasks on the reference worker is in
tests/integration/workers/test_django_tasks.py.
"""

from __future__ import annotations

import pytest

from taskforge_client.django_tasks import TaskForgeBackend, taskforge_priority


@pytest.mark.parametrize(
    ("django", "taskforge"),
    [
        *[(100, 1), (76, 1), (75, 2), (51, 2), (50, 3), (26, 3), (25, 4), (1, 4), (0, 5)],
        *[(-1, 6), (-20, 6), (-21, 7), (-40, 7), (-60, 8), (-61, 9), (-80, 9), (-81, 10), (-100, 10)],
    ],
)
def test_django_priority_maps_onto_taskforge_priority(django, taskforge):
    assert taskforge_priority(django) == taskforge


def test_missing_options_fail_the_system_check():
    (error,) = TaskForgeBackend("default", {"OPTIONS": {"url": "http://localhost:8080"}}).check()
    assert error.id == "taskforge.E001"
    assert "api_key" in error.msg
    assert TaskForgeBackend("default", {"OPTIONS": {"url": "http://x", "api_key": "k"}}).check() == []
