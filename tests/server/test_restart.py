"""Restart: SIGKILL the server with tasks working, input-required and completed; restart it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from tests.bounds import LOADED_MACHINE_S

from conftest import LegacyClient, ModernClient

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

STARTUP_LIMIT_S = LOADED_MACHINE_S
POLL_STEP_S = 0.05
RERUN_HOLD_S = 5.0
"""Long enough that the SIGKILL lands while the first process still holds the task, on a
busy machine too: the test makes the re-run it checks."""
SERVER_SCRIPT = Path(__file__).with_name("restart_server.py")


def free_port() -> int:
    """A port that was free a moment ago on 127.0.0.1 (the child binds it itself)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """The restart-test server as a real child process."""

    def __init__(self, store: str, port: int, argv: list[str] | None = None) -> None:
        self.store = store
        self.port = port
        self.argv = argv or [str(SERVER_SCRIPT), "--store", store, "--port", str(port)]
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            [sys.executable, *self.argv],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    async def wait_ready(self, http: httpx.AsyncClient) -> None:
        """Bounded poll: a separate process gives no event to wait on."""
        deadline = time.monotonic() + STARTUP_LIMIT_S
        client = ModernClient(http, self.url)
        while True:
            try:
                await client.result("server/discover")
                return
            except httpx.TransportError:
                assert self.process is not None
                assert self.process.poll() is None, "server exited"
                assert time.monotonic() < deadline, "server did not start"
                await anyio.sleep(POLL_STEP_S)  # bounded poll of a separate process

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.kill()


@pytest.fixture
def server_process(tmp_path: Path) -> Iterator[ServerProcess]:
    """A restartable server process on a free port and a store file."""
    process = ServerProcess(str(tmp_path / "restart.db"), free_port())
    yield process
    process.stop()


async def test_every_task_answers_after_sigkill_and_restart(
    server_process: ServerProcess, http: httpx.AsyncClient
) -> None:
    """Completed stays; idempotent work re-runs; other work fails saying its process stopped."""
    server_process.start()
    await server_process.wait_ready(http)
    modern = ModernClient(http, server_process.url)
    legacy = LegacyClient(http, server_process.url)

    done = await modern.create("hold", {"seconds": 0})
    done_before = await modern.wait_status(done["taskId"], {"completed"})
    once = await modern.create("once", {"seconds": 60})
    ask = await modern.create("ask", {})
    ask_before = await modern.wait_status(ask["taskId"], {"input_required"})
    ask_once = await modern.create("ask_once", {})
    await modern.wait_status(ask_once["taskId"], {"input_required"})
    legacy_once = await legacy.create("once", {"seconds": 60})
    rerun = await modern.create("hold", {"seconds": RERUN_HOLD_S})
    assert server_process.process is not None
    first_pid = server_process.process.pid

    server_process.kill()
    server_process.start()
    await server_process.wait_ready(http)

    assert await modern.get(done["taskId"]) == done_before

    # The dead process's lease must expire before anyone takes its tasks over (D1).
    failed = await modern.wait_status(once["taskId"], {"failed"})
    assert failed["status"] == "failed"
    assert "process running this task stopped" in failed["error"]["message"]
    assert "not re-run" in failed["statusMessage"]
    assert (await modern.wait_status(ask_once["taskId"], {"failed"}))["status"] == "failed"
    legacy_final = await legacy.final(legacy_once["taskId"])
    assert "stopped" in legacy_final["error"]["message"]
    legacy_failed = await legacy.result("tasks/get", {"taskId": legacy_once["taskId"]})
    assert legacy_failed["status"] == "failed"

    completed = await modern.wait_status(rerun["taskId"], {"completed", "failed"})
    assert completed["status"] == "completed"
    assert completed["result"]["structuredContent"]["held"] == RERUN_HOLD_S
    assert completed["result"]["structuredContent"]["pid"] != first_pid  # ran again after restart

    asked = await modern.wait_status(ask["taskId"], {"input_required"})
    assert asked["inputRequests"] == ask_before["inputRequests"]
    key = next(iter(asked["inputRequests"]))
    answer = {key: {"action": "accept", "content": {"ok": True}}}
    await modern.result("tasks/update", {"taskId": ask["taskId"], "inputResponses": answer})
    answered = await modern.wait_status(ask["taskId"], {"completed"})
    assert answered["result"]["structuredContent"] == {"action": "accept", "content": {"ok": True}}


async def test_longcall_serve_runs_the_reference_server(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    """``longcall serve --store --host --port`` serves the five reference tools at /mcp."""
    port = free_port()
    store = f"sqlite:///{tmp_path / 'cli.db'}"
    command = "from longcall.cli import main; main()"
    argv = ["-c", command, "serve", "--store", store, "--host", "127.0.0.1", "--port", str(port)]
    process = ServerProcess(store, port, argv)
    process.start()
    try:
        await process.wait_ready(http)
        client = ModernClient(http, process.url)
        tools = await client.result("tools/list")
        assert {tool["name"] for tool in tools["tools"]} == {
            "sleep_report",
            "crawl",
            "approve",
            "fail",
            "echo",
        }
        task = await client.create("crawl", {"pages": 0, "items_per_page": 0})
        assert (await client.wait_status(task["taskId"], {"completed"}))["status"] == "completed"
        assert (tmp_path / "cli.db").exists()
    finally:
        process.stop()
