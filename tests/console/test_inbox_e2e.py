"""A person answers from the console's inbox and the tool resumes: ``longcall serve``,
``longcall call``, ``longcall worker`` and ``longcall console`` as separate processes on
127.0.0.1, the answer given in headless Chromium. The call is accepted once: one
receipt, one outbox row, one task at the server."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.console.conftest import Shots

from longcall.ledger import SQLiteLedger

pytestmark = pytest.mark.slow

START_TIMEOUT_S = LOADED_MACHINE_S
SETTLE_MS = 120_000


class Process:
    """A ``longcall`` process whose output lines can be awaited (bounded)."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "longcall", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.log = log
        assert self.popen.stdout is not None
        threading.Thread(target=self._read, args=(self.popen.stdout,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        with self.log.open("w") as log:
            for line in stream:
                log.write(line)
                log.flush()
                self.lines.put(line)
        self.lines.put(None)

    def line_matching(self, pattern: str) -> re.Match[str]:
        seen: list[str] = []
        while True:
            try:
                line = self.lines.get(timeout=START_TIMEOUT_S)
            except queue.Empty:
                raise AssertionError(f"no line matching {pattern!r}; saw {seen}") from None
            if line is None:
                raise AssertionError(f"ended before {pattern!r}; saw {seen}")
            seen.append(line)
            found = re.search(pattern, line)
            if found:
                return found

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGINT)
            try:
                self.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=30)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[list[Process]]:
    """Started processes, stopped at the end whatever happened."""
    started: list[Process] = []
    try:
        yield started
    finally:
        for process in reversed(started):
            process.stop()


def test_an_answer_from_the_inbox_resumes_the_tool_once(
    browser: Any, tmp_path: Path, processes: list[Process], shots: Shots
) -> None:
    """The question appears in the inbox by itself (live), the form built from its
    schema refuses nothing valid, the answer is stored, the running worker sends it,
    the tool completes, and the operation page turns to accepted without a reload."""
    env = {k: v for k, v in os.environ.items() if k not in ("LONGCALL_LEDGER", "COLUMNS")}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    ledger_path = tmp_path / "ledger.db"
    ledger = f"sqlite:///{ledger_path}"
    store = tmp_path / "tasks.db"

    server = Process(
        ["serve", "--store", f"sqlite:///{store}", "--port", "0"], env, tmp_path / "serve.log"
    )
    processes.append(server)
    url = server.line_matching(r"serving MCP at (http://\S+/mcp)").group(1)
    call = subprocess.run(
        [sys.executable, "-m", "longcall", "call", url, "approve", "--args",
         json.dumps({"change": "rotate the signing keys"}), "--node", "gate",
         "--ledger", ledger, "--json"],
        env=env, capture_output=True, text=True, timeout=START_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert call.returncode == 0, call.stderr
    console = Process(["console", "--ledger", ledger], env, tmp_path / "console.log")
    processes.append(console)
    first = console.lines.get(timeout=START_TIMEOUT_S)  # its very first line: the address
    found = re.fullmatch(r"(http://127\.0\.0\.1:\d+/\?token=[\w-]{40,})\n", first or "")
    assert found is not None, first
    address = found.group(1)
    base = address.split("/?", 1)[0]

    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    page.set_default_timeout(SETTLE_MS)
    try:
        page.goto(address)
        page.goto(f"{base}/inbox")
        processes.append(Process(["worker", "--ledger", ledger], env, tmp_path / "worker.log"))
        question = page.locator("#q-gate")
        question.wait_for()  # arrives by the live update, once the worker saw it
        assert "Approve this change? rotate the signing keys" in question.inner_text()
        shots.take(page, "inbox")
        question.locator("select[name='field.approved']").select_option("true")
        question.locator("form.answer button").click()
        page.wait_for_selector("#flash")
        assert "answer stored for round" in page.locator("#flash").inner_text()
        assert "longcall ops answer gate --key" in page.locator("#flash").inner_text()
        page.wait_for_selector("#banner.done")  # the worker finished it: seen live
        assert "ok" in page.locator("#banner").inner_text()
    finally:
        context.close()
    with SQLiteLedger(ledger_path) as ledger_db:
        receipts = [r for r in ledger_db.receipts() if r.call_node_id == "gate"]
        assert len(receipts) == 1
        assert ledger_db.outbox_of("gate") is not None
        result = json.loads(ledger_db.result_payload("gate") or b"null")
        assert result["structuredContent"] == {
            "change": "rotate the signing keys",
            "approved": True,
        }
        events = [h.event for h in ledger_db.history("gate")]
        assert events.count("InputAnswered") == 1
    db = sqlite3.connect(store)
    try:
        assert db.execute("SELECT count(*) FROM tasks").fetchone()[0] == 1
    finally:
        db.close()
