"""Bearer API keys: creation, lookup and the role check.

Raw keys are shown once and stored only as a SHA-256 hash. A key is random
(256 bits), so a fast hash is the right tool: there is nothing to brute-force.
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import logging
import secrets
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from queues.models import ApiKey
from taskforge.infra import rowcache
from taskforge.ops import audit

KEY_PREFIX = "tf_"
Role = ApiKey.Role
logger = logging.getLogger("taskforge.apikeys")


# Every request authenticates, and a key row only changes when it is created or
# revoked: each process keeps the keys it has seen (taskforge.infra.rowcache), saving a
# Postgres query per request; a revocation in any process takes effect at once.
def _load_active_key(digest: str) -> ApiKey | None:
    return ApiKey.objects.filter(key_hash=digest, revoked_at__isnull=True).first()


_active_keys: rowcache.RowCache[ApiKey] = rowcache.RowCache(_load_active_key)


@receiver(post_save, sender=ApiKey)
@receiver(post_delete, sender=ApiKey)
def forget_cached_keys(**kwargs: Any) -> None:
    """Invalidate every process's cached keys (after the change commits)."""
    rowcache.changed()


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def new_raw_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def create_key(name: str, role: str, raw: str | None = None, *, actor: str | None = None) -> tuple[ApiKey, str]:
    """Create a key (random unless ``raw`` is given); return it with the raw secret.

    ``actor`` names who asked (an admin user, ``cli:<os user>``); it goes to the audit log.
    """
    raw = raw or new_raw_key()
    if len(raw) < 32:
        raise ValueError("an API key must be at least 32 characters")
    try:
        # A savepoint: inside a caller's transaction the failed insert must not poison it.
        with transaction.atomic():
            key = ApiKey.objects.create(name=name, role=role, prefix=raw[:10], key_hash=hash_key(raw))
    except IntegrityError:
        raise ValueError(f"an API key named {name!r} already exists") from None
    _audit("apikey.created", key, actor)
    return key, raw


def revoke_key(name: str, *, actor: str | None = None) -> bool:
    revoked = bool(ApiKey.objects.filter(name=name, revoked_at__isnull=True).update(revoked_at=timezone.now()))
    forget_cached_keys()
    if revoked:
        _audit("apikey.revoked", ApiKey.objects.get(name=name), actor)
    return revoked


def _audit(event: str, key: ApiKey, actor: str | None) -> None:
    verb = "created" if event == "apikey.created" else "revoked"
    audit.record(
        event,
        actor,
        f"API key {key.name!r} ({key.role}, prefix {key.prefix}) {verb}",
        key_name=key.name,
        role=key.role,
        prefix=key.prefix,
    )


def command_actor() -> str:
    """The actor recorded for management commands: the operating-system user."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # a container user without a passwd entry
        return "cli:unknown"


# What a 401 says in WWW-Authenticate (RFC 9110): how to authenticate.
AUTHENTICATE_HEADER = 'Bearer realm="taskforge"'


def key_for(authorization: str) -> ApiKey | None:
    """The active key an ``Authorization`` header names; None when there is no header.

    Raises ``AuthenticationFailed`` for a malformed header or an unknown or
    revoked key. Every API request authenticates here: through DRF
    (:class:`ApiKeyAuthentication`) or at the lean edge (:func:`authorize`).
    """
    if not authorization:
        return None
    scheme, _, raw = authorization.partition(" ")
    raw = raw.strip()
    if scheme.lower() != "bearer" or not raw:
        raise exceptions.AuthenticationFailed("use Authorization: Bearer <api key>")
    digest = hash_key(raw)
    key = _active_keys.get(digest)
    if key is None or not hmac.compare_digest(key.key_hash, digest):
        raise exceptions.AuthenticationFailed("unknown or revoked API key")
    return key


def authorize(authorization: str, view_class: type, method: str) -> ApiKey:
    """Authenticate and check the role as a DRF view would: the 401, then the 403, in that order.

    For requests served without DRF (``taskforge.http.lean``); the exceptions
    carry the WWW-Authenticate header DRF would add to a 401.
    """
    try:
        key = key_for(authorization)
        HasRole.check(key, HasRole.needed_role(view_class, method))
    except (exceptions.NotAuthenticated, exceptions.AuthenticationFailed) as exc:
        exc.auth_header = AUTHENTICATE_HEADER  # type: ignore[union-attr]
        raise
    assert key is not None  # check() refused a missing key
    return key


class ApiKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[ApiKey, str] | None:
        key = key_for(request.META.get("HTTP_AUTHORIZATION", ""))
        return None if key is None else (key, request.META["HTTP_AUTHORIZATION"].partition(" ")[2].strip())

    def authenticate_header(self, request: Request) -> str:
        return AUTHENTICATE_HEADER


class HasRole(BasePermission):
    """The one role check; each API view declares, as data, the role each method needs.

    ``roles = {"GET": Role.PRODUCER, "POST": Role.ADMIN}`` on the view is read
    here to answer 403, and by the OpenAPI document (``openapi_description``,
    through ``taskforge.http.openapi_hooks``) to say who may call it, so the
    two cannot disagree. An admin key may do everything. A method the view
    does not declare passes here so that it is answered 405 (after 401 and
    403, as the contract orders them).
    """

    @staticmethod
    def needed_role(view: Any, method: str) -> str | None:
        """The role ``method`` needs on ``view`` (a view or its class); HEAD needs GET's."""
        roles: dict[str, str] = getattr(view, "roles", {})
        needed = roles.get(method)
        if needed is None and method == "HEAD":
            needed = roles.get("GET")
        return needed

    @staticmethod
    def check(key: Any, needed: str | None) -> None:
        """Refuse ``key`` (401 without one, else 403) unless it may do what needs ``needed``."""
        if not isinstance(key, ApiKey):
            raise exceptions.NotAuthenticated("an API key is required (Authorization: Bearer <key>)")
        if needed is None or key.role == Role.ADMIN or key.role == needed:
            return
        raise exceptions.PermissionDenied(f"this endpoint needs the {needed} role; this key is {key.role}")

    def has_permission(self, request: Request, view: Any) -> bool:
        self.check(request.user, self.needed_role(view, request.method or ""))
        return True

    @classmethod
    def openapi_description(cls, view_class: type, method: str) -> str | None:
        """Who may call ``method`` on ``view_class``, for the operation's description."""
        needed = cls.needed_role(view_class, method)
        if needed is None:
            return None
        if needed == Role.ADMIN:
            return "Role: `admin`."
        return f"Role: `{needed}` (or `admin`)."
