"""The old names of the client, kept for one release, still reach the ``taskforge_client`` objects.

docker-compose.yml and deploy/kubernetes/ run ``python -m workers --handler
workers.demo:handle``; users' settings may name
``workers.django_tasks.TaskForgeBackend``.
"""

from __future__ import annotations

import subprocess
import sys

from django.utils.module_loading import import_string

import taskforge_client
from taskforge_client.demo import handle
from taskforge_client.django_tasks import TaskForgeBackend
from taskforge_client.worker.config import load_config
from taskforge_client.worker.runner import Runner
from tests.live import ROOT


def test_the_old_module_paths_name_the_same_objects():
    assert import_string("workers.django_tasks.TaskForgeBackend") is TaskForgeBackend
    assert import_string("workers.demo.handle") is handle
    assert import_string("workers.runner.Runner") is Runner
    assert import_string("workers.runner.load_config") is load_config
    for name in ("TaskForgeClient", "TaskForgeError", "LeaseLost", "ConnectionFailed", "NotFound"):
        assert import_string(f"workers.client.{name}") is getattr(taskforge_client, name)
    for name in ("Retry", "Fail"):
        assert import_string(f"workers.errors.{name}") is getattr(taskforge_client, name)


def test_python_m_workers_runs_the_reference_worker():
    done = subprocess.run(
        [sys.executable, "-m", "workers", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m workers ")
    assert "--handler" in done.stdout and "[WORKER_CONCURRENCY]" in done.stdout
