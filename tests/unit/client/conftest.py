"""The in-process fixtures of ``taskforge_client.testing``, as a project's conftest would take them."""

from taskforge_client.testing import taskforge_deferred, taskforge_eager

__all__ = ["taskforge_deferred", "taskforge_eager"]
