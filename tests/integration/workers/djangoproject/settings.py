"""Settings of a minimal Django project that hands its @task functions to TaskForge.

It stands for a user's project: the tests enqueue through it and the worker
runs with ``DJANGO_SETTINGS_MODULE`` pointing here. No database: tasks that
need one work the same way with the project's own DATABASES.
"""

import os

SECRET_KEY = "test-only-not-secret"
USE_TZ = True
INSTALLED_APPS: list[str] = []
TASKS = {
    "default": {
        "BACKEND": "taskforge_client.django_tasks.TaskForgeBackend",
        "QUEUES": ["default", "reports"],
        "OPTIONS": {
            "url": os.environ.get("TASKFORGE_API_URL", ""),
            "api_key": os.environ.get("TASKFORGE_PRODUCER_KEY", ""),
            "queue": "django",
        },
    }
}
