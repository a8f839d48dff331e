"""The answer for paths outside the contract: 401 without a key, else 404."""

from __future__ import annotations

from typing import Any, NoReturn

from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.views import APIView


class UnknownPathView(APIView):
    roles: dict[str, str] = {}
    schema = None  # not part of the API

    def _not_found(self, request: Request, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotFound("no such endpoint")

    get = post = put = patch = delete = head = options = _not_found
