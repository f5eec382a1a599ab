"""The adapters against the interop peer: fastmcp 4 + fastmcp-tasks 4 (memory:// backend)
in a subprocess on 127.0.0.1 (P1, P2, P5, X1). fastmcp-tasks speaks only 2026-07-28
tasks; over a 2025-11-25 handshake it advertises no ``capabilities.tasks``, so there the
only correct client behaviour is the synchronous path (or a refusal)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.bounds import LOADED_MACHINE_S

from longcall.adapters.base import Outcome, TaskSupportMissing
from longcall.adapters.mcp.client import McpTasks20260728Adapter, SyncAdapter, connect
from longcall.core import State
from longcall.core.events import (
    CancelAcknowledged,
    CancellationObserved,
    CancelRequested,
    InputAnswered,
    InputRequestObserved,
    ResultFetched,
    SubmitAcknowledged,
    TerminalObserved,
    WorkingObserved,
)
from longcall.core.record import ResultKind, ServerStatus

from .conftest import Driver

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PEER = Path(__file__).with_name("fastmcp_peer.py")
START_LIMIT_S = LOADED_MACHINE_S
POLL_LIMIT_S = LOADED_MACHINE_S
POLL_PAUSE_S = 0.1
"""The peer asks for pollIntervalMs=100; we honour it between polls (X3)."""


@pytest.fixture(scope="module")
def peer_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The peer process; its URL once it has written its port (bounded wait)."""
    port_file = tmp_path_factory.mktemp("peer") / "port"
    process = subprocess.Popen(
        [sys.executable, str(PEER), str(port_file)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + START_LIMIT_S
        while not port_file.exists() or not port_file.read_text():
            if process.poll() is not None:
                stderr = process.stderr.read().decode() if process.stderr else ""
                pytest.fail(f"the fastmcp peer exited: {stderr[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail("the fastmcp peer did not start in time")
            time.sleep(0.05)  # a separate process: bounded polling of its port file
        yield f"http://127.0.0.1:{port_file.read_text()}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr:
            process.stderr.close()


async def _poll_until(driver: Driver, *kinds: type) -> Outcome:
    """Poll (at the peer's interval, bounded) until the outcome is one of ``kinds``."""
    with anyio.fail_after(POLL_LIMIT_S):
        while True:
            outcome = await driver.poll()
            if isinstance(outcome.event, kinds):
                return outcome
            assert isinstance(outcome.event, WorkingObserved), outcome
            await anyio.sleep(POLL_PAUSE_S)


async def _started(url: str, tool: str, arguments: dict[str, Any]) -> Driver:
    adapter = await connect(url)
    assert isinstance(adapter, McpTasks20260728Adapter)
    driver = Driver(adapter, await adapter.bind(tool), arguments)
    outcome = await driver.submit()
    assert isinstance(outcome.event, SubmitAcknowledged), outcome
    assert outcome.event.poll_interval_s == 0.1
    assert outcome.event.ttl_s == 900.0
    return driver


async def test_peer_negotiates_p1_without_lookup(peer_url: str) -> None:
    """discover + the extension -> P1; no submission-key extension -> no lookup (X1, X2)."""
    adapter = await connect(peer_url)
    try:
        assert isinstance(adapter, McpTasks20260728Adapter)
        binding = await adapter.bind("add")
        assert binding.submission_lookup is False
    finally:
        await adapter.aclose()


async def test_peer_completion(peer_url: str) -> None:
    """create -> completed -> the inlined result is fetched and verified (X6)."""
    driver = await _started(peer_url, "add", {"a": 2, "b": 3})
    try:
        await _poll_until(driver, TerminalObserved)
        fetched = await driver.fetch()
        assert isinstance(fetched.event, ResultFetched), fetched
        assert fetched.event.result_kind is ResultKind.VALUE
        assert fetched.payload is not None
        assert json.loads(fetched.payload)["structuredContent"] == {"sum": 5}
        assert driver.record.state is State.ACCEPTED
    finally:
        await driver.adapter.aclose()


async def test_peer_tool_error_and_protocol_error(peer_url: str) -> None:
    """ToolError -> completed + isError (TOOL_ERROR); MCPError -> failed (PROTOCOL_ERROR)."""
    kinds = {}
    for tool in ("tool_error", "protocol_error"):
        driver = await _started(peer_url, tool, {})
        try:
            await _poll_until(driver, TerminalObserved)
            fetched = await driver.fetch()
            assert isinstance(fetched.event, ResultFetched), fetched
            kinds[tool] = (fetched.event.result_kind, fetched.event.status)
        finally:
            await driver.adapter.aclose()
    assert kinds["tool_error"] == (ResultKind.TOOL_ERROR, ServerStatus.COMPLETED)
    assert kinds["protocol_error"] == (ResultKind.PROTOCOL_ERROR, ServerStatus.FAILED)


async def test_peer_input_required(peer_url: str) -> None:
    """inputRequests -> InputRequestObserved; tasks/update answers the key -> completed (X4)."""
    driver = await _started(peer_url, "ask_name", {})
    try:
        asked = await _poll_until(driver, InputRequestObserved)
        assert isinstance(asked.event, InputRequestObserved)
        keys = asked.event.keys
        driver.apply(InputAnswered(input_round=driver.record.input_round, keys=keys))
        answers = {key: {"action": "accept", "content": {"name": "Luca"}} for key in keys}
        assert await driver.adapter.send_input(driver.record, answers) is None
        await _poll_until(driver, TerminalObserved)
        fetched = await driver.fetch()
        assert fetched.payload is not None
        assert "Hello, Luca!" in fetched.payload.decode()
    finally:
        await driver.adapter.aclose()


async def test_peer_cancel(peer_url: str) -> None:
    """tasks/cancel is an ack (X5); the cancelled terminal is read by a later poll."""
    driver = await _started(peer_url, "linger", {"seconds": 30})
    try:
        driver.apply(CancelRequested())
        ack = await driver.adapter.cancel(driver.record)
        assert isinstance(ack.event, CancelAcknowledged), ack
        driver.apply(ack)
        proof = await _poll_until(driver, CancellationObserved)
        assert isinstance(proof.event, CancellationObserved)
        assert driver.record.state is State.CANCELLED_ACCEPTED
    finally:
        await driver.adapter.aclose()


async def test_peer_sync_tool(peer_url: str) -> None:
    """A tool without task support answers inline through the P1 adapter (X10)."""
    adapter = await connect(peer_url)
    try:
        driver = Driver(adapter, await adapter.bind("shout"), {"text": "hi"})
        outcome = await driver.submit()
        assert isinstance(outcome.event, ResultFetched), outcome
    finally:
        await adapter.aclose()


async def test_peer_at_2025_11_25_is_sync_only(peer_url: str) -> None:
    """P2 cannot run against fastmcp-tasks: over 2025-11-25 it declares no
    capabilities.tasks (reference §5/§7.8), so negotiation falls back to sync, plain tools
    still work, and a task-required tool is refused with TaskSupportMissing (X1)."""
    adapter = await connect(peer_url, prefer="2025-11-25")
    try:
        assert isinstance(adapter, SyncAdapter)
        driver = Driver(adapter, await adapter.bind("shout"), {"text": "hi"})
        outcome = await driver.submit()
        assert isinstance(outcome.event, ResultFetched), outcome
        assert outcome.payload is not None
        assert "HI" in outcome.payload.decode()
        with pytest.raises(TaskSupportMissing):
            await adapter.bind("add")
    finally:
        await adapter.aclose()
