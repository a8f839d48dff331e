"""Named failpoints: make a TaskForge process crash or stall at a chosen spot.

Fault tests need "the process died after the commit but before the response"
to happen on demand, not by luck. Code marks such spots with
``failpoint("claim.after_commit")``; the call does nothing unless the
``TASKFORGE_FAILPOINTS`` setting names that spot, so production pays one dict
lookup.

The setting is a comma-separated list of ``name=spec``, where ``spec`` follows
the fail-rs / FreeBSD fail(9) convention ``[P%][N*]action[:arg]``:

* ``kill``: SIGKILL this process (no cleanup, no response, like a power cut);
* ``raise``: raise ``FailpointError`` (the request answers 500);
* ``sleep:S``: stall for S seconds (float);
* ``off``: do nothing.

``P%`` fires with probability P percent, ``N*`` at most N times per process.
Example: ``TASKFORGE_FAILPOINTS="claim.after_commit=5%kill,ack.after_commit=1*sleep:3"``.

Named points: ``enqueue.after_commit``, ``claim.after_commit``,
``ack.after_commit``, ``watchdog.after_expire``.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import threading
import time
from dataclasses import dataclass, field

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

POINTS = frozenset({"enqueue.after_commit", "claim.after_commit", "ack.after_commit", "watchdog.after_expire"})
ACTIONS = frozenset({"kill", "raise", "sleep", "off"})
_SPEC = re.compile(r"^(?:(?P<pct>\d+(?:\.\d+)?)%)?(?:(?P<count>\d+)\*)?(?P<action>[a-z]+)(?::(?P<arg>[0-9.]+))?$")


class FailpointError(RuntimeError):
    """Raised by a failpoint configured with ``raise``."""


@dataclass
class Failpoint:
    name: str
    action: str
    arg: float = 0.0
    percent: float = 100.0
    remaining: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def should_fire(self) -> bool:
        if self.action == "off":
            return False
        if self.percent < 100.0 and random.uniform(0, 100) >= self.percent:
            return False
        # The count is per process and shared by its threads (sync views run in threads).
        with self.lock:
            if self.remaining is not None:
                if self.remaining <= 0:
                    return False
                self.remaining -= 1
        return True


def parse(config: str) -> dict[str, Failpoint]:
    """Parse the setting; an unknown point or malformed spec fails loudly."""
    points: dict[str, Failpoint] = {}
    for entry in config.split(","):
        entry = entry.strip()
        if not entry:
            continue
        name, sep, spec = entry.partition("=")
        name, spec = name.strip(), spec.strip()
        match = _SPEC.match(spec)
        if not sep or name not in POINTS or match is None or match["action"] not in ACTIONS:
            raise ImproperlyConfigured(
                f"TASKFORGE_FAILPOINTS: bad entry {entry!r} (want NAME=[P%][N*]kill|raise|sleep:S|off, "
                f"NAME one of {', '.join(sorted(POINTS))})"
            )
        if match["action"] == "sleep" and match["arg"] is None:
            raise ImproperlyConfigured(f"TASKFORGE_FAILPOINTS: {entry!r} needs seconds (sleep:S)")
        points[name] = Failpoint(
            name=name,
            action=match["action"],
            arg=float(match["arg"] or 0),
            percent=float(match["pct"]) if match["pct"] is not None else 100.0,
            remaining=int(match["count"]) if match["count"] is not None else None,
        )
    return points


_cache: tuple[str, dict[str, Failpoint]] = ("", {})


def _configured() -> dict[str, Failpoint]:
    # Re-parsed only when the setting changes (tests override it); counts live in the parsed objects.
    global _cache
    config = settings.TASKFORGE_FAILPOINTS
    if config != _cache[0]:
        _cache = (config, parse(config))
    return _cache[1]


def failpoint(name: str) -> None:
    """Act as configured for ``name``; do nothing when it is not configured."""
    point = _firing(name)
    if point is not None and point.action == "sleep":
        time.sleep(point.arg)


async def failpoint_on_loop(name: str) -> None:
    """:func:`failpoint` for code on the event loop: a ``sleep`` there holds up that request only."""
    point = _firing(name)
    if point is not None and point.action == "sleep":
        await asyncio.sleep(point.arg)


def _firing(name: str) -> Failpoint | None:
    """The failpoint ``name`` when it fires now; a kill or a raise happens here."""
    if not settings.TASKFORGE_FAILPOINTS:
        return None
    point = _configured().get(name)
    if point is None or not point.should_fire():
        return None
    if point.action == "kill":
        # SIGKILL, not sys.exit: no finally blocks, no atexit, no response sent.
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(10)  # the signal is delivered asynchronously; never run on
    elif point.action == "raise":
        raise FailpointError(f"failpoint {name} fired")
    return point
