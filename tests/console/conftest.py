"""Console fixtures: the console served on 127.0.0.1 by uvicorn in a thread, over a real
SQLite ledger, and headless Chromium (Debian's ``chromium``) driven by Playwright.

The browser is the system one (``make browser`` installs it; CI runs that target):
Playwright is pointed at ``/usr/bin/chromium`` and never downloads a browser of its own.
Screenshots go to the test's tmp folder; with ``LONGCALL_DOCS_SCREENSHOTS=1``
(``make screenshots``) they are also copied to ``docs/images/console/`` for the guide.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from tests.bounds import LOADED_MACHINE_S

from longcall.console import Console, open_console

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
START_TIMEOUT_S = LOADED_MACHINE_S
DOCS_SHOTS = Path(__file__).resolve().parents[2] / "docs" / "images" / "console"


@contextlib.contextmanager
def running_console(ledger_url: str, **options: Any) -> Iterator[Console]:
    """The console over ``ledger_url`` (``options`` as for open_console), served until
    the block ends."""
    console, sock = open_console(ledger_url, **options)
    config = uvicorn.Config(console.app, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=lambda: asyncio.run(server.serve(sockets=[sock])), name="console", daemon=True
    )
    thread.start()
    try:
        yield console  # the socket listens already: requests queue until uvicorn runs
    finally:
        server.should_exit = True
        thread.join(START_TIMEOUT_S)
        sock.close()
        console.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Headless Chromium, the system's, for one module's tests at a time: while it is
    open, Playwright's sync API keeps an event loop running in this thread, and a test
    of another module that runs its own loop (in the same worker) could not start."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make browser` (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


class Shots:
    """Saves screenshots under the test's tmp folder (and the docs, when asked)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def take(self, page: object, name: str) -> Path:
        path = self.folder / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
        if os.environ.get("LONGCALL_DOCS_SCREENSHOTS") == "1":
            DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, DOCS_SHOTS / path.name)
        return path


@pytest.fixture
def shots(tmp_path: Path) -> Shots:
    """Where this test's screenshots go."""
    return Shots(tmp_path / "screenshots")
