"""Liveness, readiness and the Prometheus endpoint: unauthenticated by design
(``/metrics`` takes a bearer token when ``TASKFORGE_METRICS_TOKEN`` is set)."""

from __future__ import annotations

import hmac
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import View
from redis.cluster import RedisCluster

from taskforge.http.errors import error_body
from taskforge.infra.redis import redis_client


class HealthzView(View):
    def get(self, request: HttpRequest) -> JsonResponse:
        return JsonResponse({"status": "ok"})


def check_postgres() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return None
    except Exception as exc:  # any failure means "not ready"; the message says which
        return f"postgres: {type(exc).__name__}"


def check_redis() -> str | None:
    try:
        client = redis_client()
        if isinstance(client, RedisCluster):
            # Each primary serves its share of the slots: every one must answer, and none may evict.
            client.ping(target_nodes=RedisCluster.PRIMARIES)
            replies: Any = client.config_get("maxmemory-policy", target_nodes=RedisCluster.PRIMARIES)
            # {node: {setting: value}} (typed as one node's reply), except that redis-py unwraps the reply of a
            # lone primary.
            per_node = [replies] if "maxmemory-policy" in replies else list(replies.values())
            policies = [reply.get("maxmemory-policy", "noeviction") for reply in per_node]
        else:
            client.ping()
            policies = [client.config_get("maxmemory-policy").get("maxmemory-policy", "noeviction")]
        for policy in policies:
            if policy != "noeviction":
                # An evicting Redis can silently drop dispatch state; refuse to call it ready.
                return f"redis: maxmemory-policy is {policy}, must be noeviction"
        return None
    except Exception as exc:
        return f"redis: {type(exc).__name__}"


class ReadyzView(View):
    def get(self, request: HttpRequest) -> JsonResponse:
        problems = [p for p in (check_postgres(), check_redis()) if p]
        checks = {
            "postgres": "ok" if not any(p.startswith("postgres") for p in problems) else "down",
            "redis": "ok" if not any(p.startswith("redis") for p in problems) else "down",
        }
        if problems:
            body = error_body("unavailable", "not ready: " + "; ".join(problems))
            body["checks"] = checks
            return JsonResponse(body, status=503)
        return JsonResponse({"status": "ready", "checks": checks})


class MetricsView(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        token = settings.TASKFORGE_METRICS_TOKEN
        if token:
            offered = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
            if not hmac.compare_digest(offered.encode(), token.encode()):
                return JsonResponse(error_body("unauthorized", "metrics token required"), status=401)
        from taskforge.ops.prometheus import render_metrics

        body, content_type = render_metrics()
        return HttpResponse(body, content_type=content_type)
