"""Real-browser tests of the dashboards: the app served by uvicorn on a loopback port, Debian's
headless Chromium driven by Playwright (the Python package only: it never downloads a browser).

Without Chromium or Playwright the tests are skipped, unless TUNER_REQUIRE_BROWSER=1 (set by
scripts/test.sh), which turns the skip into a failure that says what to install.
Screenshots go to a temporary directory (printed with -s); set TUNER_SCREENSHOTS=DIR to keep them.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from tests.browser.dashdata import DashboardDb, build
from tuner.testing.browser import CHROMIUM_ARGS, INSTALL_HINT, chromium_executable


def _unavailable(reason: str) -> None:
    if os.environ.get("TUNER_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (TUNER_REQUIRE_BROWSER=1); install: {INSTALL_HINT}", pytrace=False)
    pytest.skip(f"{reason}: browser tests skipped")


@pytest.fixture(scope="module")
def chromium() -> str:
    """The Chromium binary, once Playwright is known to import (else skip, or fail if required)."""
    exe = chromium_executable()
    if exe is None:
        _unavailable("chromium is not installed")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _unavailable("the playwright Python package is not installed")
    assert exe is not None
    return exe


@pytest.fixture(scope="module")
def browser(
    chromium: str, served: Served, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """A persistent Chromium context on a new, empty profile directory.

    Playwright's sync API keeps an asyncio loop running in this thread until it stops, so
    everything that uses asyncio.run (the study behind ``served``) must come first: hence the
    dependency on ``served``, and module scope (other modules may use asyncio.run). ``chromium``
    comes before it so that a missing browser skips before the study is run.
    """
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            user_data_dir=str(profile),
            executable_path=chromium,
            headless=True,
            args=list(CHROMIUM_ARGS),
            viewport={"width": 1280, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()


@pytest.fixture(scope="module")
def dashboard_db(tmp_path_factory: pytest.TempPathFactory) -> DashboardDb:
    return build(tmp_path_factory.mktemp("dashboards"))


@dataclass
class Served:
    base_url: str
    db: DashboardDb
    _server: uvicorn.Server = field(repr=False)


@pytest.fixture(scope="module")
def served(dashboard_db: DashboardDb) -> Iterator[Served]:
    """The API app (with the dashboards) on 127.0.0.1 in a thread of this process."""
    from api.app import create_app
    from api.settings import ApiSettings

    app = create_app(ApiSettings(storage=dashboard_db.url))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", ws="none", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start within 10 s")
        time.sleep(0.02)
    try:
        yield Served(f"http://127.0.0.1:{port}", dashboard_db, server)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    keep = os.environ.get("TUNER_SCREENSHOTS")
    path = Path(keep) if keep else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class Probe:
    """A page with what went wrong on it: console errors, uncaught exceptions, and requests
    that left the app (the dashboards must load nothing from elsewhere, no CDN)."""

    page: Any
    base_url: str
    errors: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)

    def goto(self, path: str) -> Any:
        response = self.page.goto(self.base_url + path, wait_until="load")
        return response

    def assert_clean(self) -> None:
        assert self.errors == [], f"JavaScript errors: {self.errors}"
        assert self.foreign == [], f"requests outside the app: {self.foreign}"


@pytest.fixture()
def probe(browser: Any, served: Served) -> Iterator[Probe]:
    page = browser.new_page()
    p = Probe(page, served.base_url)
    page.on("console", lambda m: p.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: p.errors.append(f"uncaught: {e}"))

    def on_request(request: Any) -> None:
        if not request.url.startswith((served.base_url, "data:")):
            p.foreign.append(request.url)

    page.on("request", on_request)
    try:
        yield p
    finally:
        page.close()
