"""Django's tasks framework on TaskForge: ``TASKS = {"default": {"BACKEND":
"taskforge_client.django_tasks.TaskForgeBackend", ...}}``.

``backend`` enqueues and reads results (in the Django project);
``execute`` runs the tasks (in the reference worker). Needs Django, the
``django`` extra: ``pip install taskforge-client[django]``.
"""

from taskforge_client.django_tasks.backend import TaskForgeBackend, taskforge_priority

__all__ = ["TaskForgeBackend", "taskforge_priority"]
