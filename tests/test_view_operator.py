"""The operator's page in a real browser (headless Debian chromium through Playwright).

A served world's page opened at its plain URL watches and its controls are refused;
opened at the URL ``barnraise serve`` prints (``#operator=TOKEN``) its controls drive
the world, and from another host (played by ``X-Forwarded-For`` on loopback) it
watches only with the token, which the page sends itself from its URL fragment.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from barnraise.sim.dispatch import RealtimeDispatcher
from barnraise.view import headless
from tests.test_operator import REMOTE, TOKEN, served_view

WHY = headless.missing()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"no headless browser: {WHY}")

if WHY is None:
    from playwright.sync_api import Browser, Page, sync_playwright

WAIT_MS = 20_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = headless.launch(playwright)
        try:
            yield launched
        finally:
            launched.close()


def _open(browser: Browser, url: str, headers: dict[str, str] | None = None) -> Page:
    context = browser.new_context(viewport={"width": 1280, "height": 900},
                                  extra_http_headers=headers)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url)
    page.errors = errors  # type: ignore[attr-defined]
    return page


def test_the_page_drives_a_served_world_only_with_the_operators_token(
        browser: Browser) -> None:
    with served_view() as (server, world):
        dispatcher = world.simulation.dispatcher
        assert isinstance(dispatcher, RealtimeDispatcher)
        # The plain URL: the page watches; Pause is refused and said so on the page.
        page = _open(browser, server.url + "/")
        page.wait_for_function("window.__view.frameMessages > 0")
        page.wait_for_function("!document.querySelector('#btn-pause').disabled")
        page.click("#btn-pause")
        page.wait_for_function(
            "[...document.querySelectorAll('#log div')].some(li => "
            "li.textContent.includes('control refused') && li.textContent.includes('operator'))")
        assert not dispatcher.holding
        assert page.errors == []  # type: ignore[attr-defined]
        page.context.close()
        # The operator's URL: the same button holds the world.
        page = _open(browser, f"{server.url}/#operator={TOKEN}")
        page.wait_for_function("window.__view.frameMessages > 0")
        page.wait_for_function("!document.querySelector('#btn-pause').disabled")
        page.click("#btn-pause")
        page.wait_for_function("window.__view.state === 'paused'")
        assert dispatcher.holding
        page.click("#btn-start")
        page.wait_for_function("window.__view.state === 'running'")
        assert not dispatcher.holding
        assert page.errors == []  # type: ignore[attr-defined]
        page.context.close()


def test_from_another_host_the_page_watches_with_the_token_only(browser: Browser) -> None:
    with served_view() as (server, _world):
        with_token = _open(browser, f"{server.url}/#operator={TOKEN}", REMOTE)
        with_token.wait_for_function("window.__view.frameMessages > 0")
        without = _open(browser, server.url + "/", REMOTE)
        # the page without the token is told why, and gets no frame
        without.wait_for_function(
            "[...document.querySelectorAll('#log div')].some(li => "
            "li.textContent.includes('operator'))")
        assert without.evaluate("window.__view.frameMessages") == 0
        for page in (with_token, without):
            assert page.errors == []  # type: ignore[attr-defined]
            page.context.close()
