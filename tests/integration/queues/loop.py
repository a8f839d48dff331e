"""Running a test's scenario on the event loop, as the API process runs its calls there."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from taskforge.infra.postgres import aio


def run[T](scenario: Callable[[], Awaitable[T]]) -> T:
    """Run ``scenario`` on a fresh event loop, then close that loop's pool (as the API process does when it stops)."""

    async def main() -> T:
        try:
            return await scenario()
        finally:
            await aio.close()

    return asyncio.run(main())
