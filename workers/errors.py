"""Deprecated alias of ``taskforge_client.outcomes``, kept for one release.

Handlers import ``from taskforge_client import Fail, Retry`` now (the
``taskforge-client`` distribution, ``clients/python/``). This module only
re-exports them and goes away in the next release.
"""

from taskforge_client.outcomes import Fail, Retry

__all__ = ["Fail", "Retry"]
