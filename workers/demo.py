"""Deprecated alias of ``taskforge_client.demo``, kept for one release.

``--handler workers.demo:handle`` (docker-compose.yml, deploy/kubernetes/)
still runs the demo handler, which lives in the ``taskforge-client``
distribution now: name it ``taskforge_client.demo:handle``.
"""

from taskforge_client.demo import DemoFailure, handle

__all__ = ["DemoFailure", "handle"]
