"""The audit trail: who replayed, discarded or purged what, who created or revoked which key.

One JSON line per operator action on the ``taskforge.ops.audit`` logger, so it can
be routed and kept apart from request logs. The admin also records its actions
in Django's ``LogEntry`` with the user; this trail also covers the API (the
actor is the API key's name) and the management commands (the OS user). A
discarded task leaves no history in Postgres, so this line is its only record.
Never log a secret here: keys are named by name and prefix only.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("taskforge.ops.audit")


def record(event: str, actor: str | None, message: str, **fields: Any) -> None:
    """Log ``message`` with ``event``, ``actor`` and ``fields`` as structured fields."""
    actor = actor or "system"
    logger.info("%s (by %s)", message, actor, extra={"event": event, "actor": actor, **fields})


def api_actor(request: Any) -> str:
    """The actor of an API request: the API key's name (as in task histories)."""
    return f"api key {request.user.name}"
