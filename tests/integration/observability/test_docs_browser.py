"""/api/docs renders the whole API in headless Chromium, from the server's own static files."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from django.core.management import call_command

from tests.browser import launch_chromium, sync_playwright_or_skip

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def page(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    with sync_playwright_or_skip(monkeypatch) as playwright:
        browser = launch_chromium(playwright)
        page = browser.new_page()
        page.set_default_timeout(20_000)
        try:
            yield page
        finally:
            browser.close()


def test_swagger_ui_shows_every_operation_without_leaving_the_server(live_stack, page) -> None:  # type: ignore[no-untyped-def]
    call_command("collectstatic", "--no-input", "-v", "0")  # served by whitenoise, as in production
    url = live_stack.start_api()
    operations = sum(
        method in {"get", "post", "patch", "delete"}
        for item in httpx.get(f"{url}/api/schema?format=json").json()["paths"].values()
        for method in item
    )
    hosts: set[str] = set()
    page.on("request", lambda request: hosts.add(urlsplit(request.url).netloc))

    page.goto(f"{url}/api/docs")
    page.wait_for_selector(".opblock-summary")
    assert page.locator(".opblock").count() == operations
    assert page.get_by_text("TaskForge API").first.is_visible()
    assert page.locator(".opblock-summary-path", has_text="/queues/{name}/tasks/batch").count() == 1
    assert page.locator("button.authorize").count() == 1, "the bearer scheme gives an Authorize button"
    assert hosts == {urlsplit(url).netloc}, f"the docs page reached out to {hosts}"
