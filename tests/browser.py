"""Headless Chromium for the browser tests: Debian's chromium driven by Playwright.

Playwright cannot download its own browser here, so tests use the system
binary with the flags a sandboxed, offline machine needs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def sync_playwright_or_skip(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Playwright's sync API, or skip when it or Debian's chromium is missing."""
    # Playwright's sync API runs an event loop in this thread; the ORM calls of
    # the test itself are still plain synchronous calls.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    sync_api = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        pytest.skip("Debian chromium is not installed (apt-get install -y chromium)")
    return sync_api.sync_playwright()


def launch_chromium(playwright: Any) -> Any:
    return playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
