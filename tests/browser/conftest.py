"""Real headless Chromium (Debian's /usr/bin/chromium, never a downloaded browser) driving the
dashboard on pytest-django's live server. Every page a test opens is watched: requests to any
other host are blocked and recorded, console errors and page errors are recorded, and both
must stay empty."""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.core.servers.basehttp import ThreadedWSGIServer
from django.db import connection
from django.test import testcases
from playwright.sync_api import Browser, Page, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from ..builders_teams import member

CHROMIUM = "/usr/bin/chromium"


class OneRequestAtATime(ThreadedWSGIServer):
    """The live server, answering one request at a time. With SQLite in memory every thread of
    the live server uses the test's one connection, and a page that loads several panels at
    once made two threads run the same query on it together: the shared prepared statement gave
    one of them another's rows (an IndexError in Django's converters, a 500 in a fresh-clone
    run; Django's documentation warns of it). Streamed answers (the live player's event stream,
    static files) are made under the lock and sent without it, so a stream left open holds up
    no other request. The lock is reentrant: the test's own queries take it too (below), and so
    does a query a request makes while its thread holds it."""

    lock = threading.RLock()

    def set_app(self, application) -> None:
        def one_at_a_time(environ, start_response):
            with self.lock:
                response = application(environ, start_response)
                if getattr(response, "streaming", False):
                    return response
                try:
                    return [b"".join(response)]
                finally:
                    response.close()

        super().set_app(one_at_a_time)


testcases.LiveServerThread.server_class = OneRequestAtATime


def one_query_at_a_time(execute, sql, params, many, context):
    with OneRequestAtATime.lock:
        return execute(sql, params, many, context)


@pytest.fixture(autouse=True)
def queries_wait_for_the_live_server():
    """The test's own queries (a row it makes or checks between two clicks, the flush after it)
    run on the connection the live server shares, so each waits for the request being answered
    and never runs inside it: one that did met "database table is locked" in a local run. A
    stream's queries after its first chunk take the lock one at a time the same way."""
    with connection.execute_wrapper(one_query_at_a_time):
        yield


CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run",
]  # fmt: skip
PASSWORD = "correct horse battery staple"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


@pytest.fixture(scope="module")
def browser() -> Browser:
    """One Chromium per test module. Playwright's sync API keeps an event loop running in this
    thread while it is open, and Django refuses ORM calls from such a thread unless told the
    mix is deliberate: the permission lasts exactly as long as the browser, so the rest of the
    suite (and the subprocesses it starts) run without it."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: install the Debian packages chromium and chromium-driver (make browser)")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as playwright:
            launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield launched
            launched.close()


@dataclass
class Watch:
    host: str
    requests: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def assert_clean(self) -> None:
        assert self.requests, "the page made requests"
        assert self.outside == [], f"requests outside the server: {self.outside}"
        assert {urlsplit(url).netloc for url in self.requests} == {self.host}
        assert self.errors == [], f"console errors: {self.errors}"


@pytest.fixture
def watched(browser: Browser, live_server) -> tuple[Page, Watch]:
    host = urlsplit(live_server.url).netloc
    watch = Watch(host=host)
    context = browser.new_context(viewport={"width": 1440, "height": 1000}, base_url=live_server.url)

    def route(route) -> None:
        url = route.request.url
        if urlsplit(url).netloc != host:
            watch.outside.append(url)
            route.abort()
        else:
            route.continue_()

    context.route("**/*", route)
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.on("request", lambda request: watch.requests.append(request.url))
    page.on("console", lambda message: watch.errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: watch.errors.append(f"page error: {error}"))
    yield page, watch
    # The page's last requests (a panel that loads itself after the test's last step) answered
    # before the test's database is flushed: one still being served then failed the flush, and
    # the next test's setup with it (a fresh-clone run). A page with an open stream never goes
    # idle: the wait ends at its limit, then the lock waits out what the server is answering.
    with contextlib.suppress(PlaywrightTimeoutError):
        page.wait_for_load_state("networkidle", timeout=3_000)
    context.close()
    with OneRequestAtATime.lock:
        pass
    watch.assert_clean()


@pytest.fixture
def analyst(transactional_db):
    return member("analyst")


def log_in(page: Page, next_path: str = "/sessions/") -> None:
    """Open a page anonymously, land on the login form, log in, come back to the page."""
    page.goto(next_path)
    assert "/accounts/login/" in page.url
    page.fill("#id_username", "analyst")
    page.fill("#id_password", PASSWORD)
    page.click("form button[type=submit]")
    page.wait_for_url(f"**{next_path}")


def save_screenshot(page: Page, name: str, tmp_path: Path) -> Path:
    """Screenshots go to tmp_path; with REPLAY_SCREENSHOTS=1 they also refresh docs/screenshots/."""
    target = tmp_path / name
    page.screenshot(path=str(target), full_page=True)
    if os.environ.get("REPLAY_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        (SCREENSHOTS / name).write_bytes(target.read_bytes())
    return target
