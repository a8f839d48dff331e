from django.apps import AppConfig
from django.contrib.admin.apps import AdminConfig


class TaskForgeAdminConfig(AdminConfig):
    """Makes the TaskForge admin site the default ``admin.site``."""

    default_site = "dashboard.site.TaskForgeAdminSite"


class DashboardConfig(AppConfig):
    name = "dashboard"
    label = "dashboard"
