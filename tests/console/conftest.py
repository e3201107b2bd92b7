"""Fixtures of the console's browser tests: one `countersign serve` for the
run (the Python client's test support starts it on free ports with a fresh
database, console included), Debian's Chromium under Playwright, and a page
signed in as a given key."""

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

# The server is started while gRPC threads run (see clients/python/tests/conftest.py).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import pytest  # noqa: E402
from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402

from support import Server  # noqa: E402

CHROMIUM = os.environ.get("COUNTERSIGN_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = Path(os.environ.get("COUNTERSIGN_SCREENSHOTS") or Path(__file__).resolve().parents[2] / "target" / "console-screenshots")
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    with tempfile.TemporaryDirectory(prefix="countersign-console-") as data:
        server = Server(Path(data))
        try:
            server.seed()
            yield server
        finally:
            server.stop()
            # The server's log, beside the screenshots.
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(data) / "serve.log", SCREENSHOTS / "serve.log")


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def sign_in(server: Server, browser: Browser) -> Iterator[Callable[..., Page]]:
    """Opens a fresh browser context (its own cookies) at `path` and signs in
    there with `key`; the page is at `path` once signed in."""
    contexts = []

    def open_as(key: str, path: str = "/", viewport: dict = DESKTOP) -> Page:
        context = browser.new_context(viewport=viewport, accept_downloads=True)
        contexts.append(context)
        page = context.new_page()
        page.goto(server.console_url + path)
        expect(page.locator("#signin-page")).to_be_visible()
        page.fill("#signin-key", key)
        page.keyboard.press("Enter")
        expect(page.locator("#signout")).to_be_visible()
        return page

    yield open_as
    for context in contexts:
        context.close()


def screenshot(page: Page, name: str) -> None:
    """Keeps a picture of the page as a test artifact."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
