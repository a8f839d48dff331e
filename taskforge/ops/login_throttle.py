"""Throttle password guessing on the admin login.

After ``MAX_FAILURES`` failed logins for one username from one client address
within ``WINDOW_SECONDS``, every further attempt for that pair is refused,
even with the right password, until the window ends. The window is fixed
(it starts at the first failure), so refused attempts do not extend it.

Two pieces, so the admin site itself needs no change:

* ``user_login_failed`` (sent by ``django.contrib.auth.authenticate``) counts
  failures in Redis, shared by every API process;
* ``ThrottledModelBackend``, Django's ``ModelBackend`` behind a check that
  refuses while the pair is throttled. The refusal is a ``ValidationError``
  so the login form shows it as its error message (a ``PermissionDenied``
  would be turned into the generic "wrong password" text).

The client address honours ``TASKFORGE_TRUSTED_PROXIES``
(``taskforge.ops.client_address``): behind a reverse proxy, set it to the
proxy's address, or every client would share the proxy's address and anyone
could lock a username out for everybody. A username is only ever locked for
one address, never for all of them. When Redis is down the throttle fails open (logins still work, with a
warning): locking every operator out of the admin during a Redis outage would
be worse than a few minutes without throttling.
"""

from __future__ import annotations

import hashlib
import logging
import math
from typing import TYPE_CHECKING, Any

import redis
from asgiref.sync import sync_to_async
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.exceptions import ValidationError
from django.dispatch import receiver
from django.http import HttpRequest

from taskforge.infra.redis import redis_client
from taskforge.ops.client_address import client_address

if TYPE_CHECKING:
    from django.contrib.auth.models import User

MAX_FAILURES = 5
WINDOW_SECONDS = 300

logger = logging.getLogger("taskforge.ops.audit")


class LoginThrottled(ValidationError):
    """Too many failures for this username and address: refused without checking the password."""


def _client_address(request: HttpRequest | None) -> str:
    return client_address(request)


def _key(username: str, address: str) -> str:
    # Hashed: bounded key length, and no usernames in Redis for a casual reader.
    digest = hashlib.sha256(f"{username.casefold()}\0{address}".encode()).hexdigest()[:32]
    return f"tf:login_failures:{digest}"


def seconds_throttled(username: str, address: str) -> int:
    """Seconds until ``username`` may try again from ``address``; 0 when allowed."""
    try:
        pipe = redis_client().pipeline(transaction=False)
        pipe.get(_key(username, address))
        pipe.ttl(_key(username, address))
        failures, ttl = pipe.execute()
    except redis.RedisError:
        logger.warning("redis unavailable: login throttle not enforced", extra={"event": "login.throttle_unavailable"})
        return 0
    if failures is None or int(failures) < MAX_FAILURES:
        return 0
    return max(int(ttl), 1)


def record_failure(username: str, address: str) -> int:
    """Count one failed login; returns the failures in the current window."""
    key = _key(username, address)
    try:
        pipe = redis_client().pipeline(transaction=True)
        pipe.set(key, 0, ex=WINDOW_SECONDS, nx=True)  # the window starts at the first failure
        pipe.incr(key)
        _, failures = pipe.execute()
    except redis.RedisError:
        logger.warning("redis unavailable: login failure not counted", extra={"event": "login.throttle_unavailable"})
        return 0
    return int(failures)


def clear(username: str, address: str) -> None:
    try:
        redis_client().delete(_key(username, address))
    except redis.RedisError:
        pass


def _refuse_if_throttled(request: HttpRequest | None, username: str | None) -> None:
    if username is None:
        return
    address = _client_address(request)
    wait = seconds_throttled(str(username), address)
    if wait:
        logger.warning(
            "login refused: too many failures for %r from %s",
            username,
            address,
            extra={"event": "login.throttled", "username": str(username), "client": address, "retry_after": wait},
        )
        minutes = math.ceil(wait / 60)
        raise LoginThrottled(
            f"Too many failed login attempts for this username from your address. "
            f"Try again in {minutes} minute{'s' if minutes != 1 else ''}.",
            code="throttled",
        )


class ThrottledModelBackend(ModelBackend):
    """``ModelBackend`` that refuses a throttled username + address before checking the password."""

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> User | None:
        _refuse_if_throttled(request, username if username is not None else kwargs.get("username"))
        return super().authenticate(request, username=username, password=password, **kwargs)

    async def aauthenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> User | None:
        await sync_to_async(_refuse_if_throttled)(request, username if username is not None else kwargs.get("username"))
        return await super().aauthenticate(request, username=username, password=password, **kwargs)


@receiver(user_login_failed, dispatch_uid="taskforge.ops.login_throttle.failed")
def _count_failure(sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any) -> None:
    username = credentials.get("username")
    if username is None:
        return
    address = _client_address(request)
    failures = record_failure(str(username), address)
    # Never the password: credentials arrive with it masked, and we only read the username.
    logger.warning(
        "login failed for %r from %s (%d in window)",
        username,
        address,
        failures,
        extra={"event": "login.failed", "username": str(username), "client": address, "failures": failures},
    )


@receiver(user_logged_in, dispatch_uid="taskforge.ops.login_throttle.succeeded")
def _reset_on_success(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    clear(user.get_username(), _client_address(request))
