"""The on-call engineer's home: the Django admin, branded for TaskForge."""

from django.contrib import admin


class TaskForgeAdminSite(admin.AdminSite):
    site_header = "TaskForge"
    site_title = "TaskForge admin"
    index_title = "Queues, tasks and the dead-letter queue"
