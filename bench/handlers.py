"""Task handlers for the benchmark's workers (``--handler bench.handlers:noop``).

``noop`` does nothing, so a drain measures the queue, not the work. ``stamp``
returns the wall-clock time it started, which the worker stores as the task's
``result``: the latency workloads read it back from Postgres.
"""

from __future__ import annotations

import time
from typing import Any


def noop(*args: Any, **kwargs: Any) -> None:
    return None


def stamp(*args: Any, **kwargs: Any) -> dict[str, float]:
    return {"started": time.time()}
