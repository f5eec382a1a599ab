"""The executor end to end against the reference server, in both MCP task versions (X1–X11)."""

from __future__ import annotations

import asyncio
import json

import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.e2e.conftest import World

from longcall.core import ResultKind, ServerStatus, State

pytestmark = pytest.mark.anyio

VERSIONS = ["2026-07-28", "2025-11-25"]


def _approve_all(record: object, ask: object) -> dict[str, object]:
    return {key: {"action": "accept", "content": {"approved": True}} for key in ask.keys}  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", VERSIONS)
async def test_completion_tool_error_protocol_error_and_empty(world: World, version: str) -> None:
    """Results are verified; tool vs protocol errors stay distinct; zero items warn (X6)."""
    await world.call("report", "sleep_report", {"seconds": 0.5, "rows": 2}, protocol=version)
    await world.call("empty", "crawl", {"pages": 0, "items_per_page": 5}, protocol=version)
    await world.call("tool-error", "fail", {"kind": "tool"}, protocol=version)
    await world.call("protocol-error", "fail", {"kind": "protocol"}, protocol=version)
    report, empty, tool_error, protocol_error = await world.settle(
        "report", "empty", "tool-error", "protocol-error"
    )
    assert {r.protocol for r in (report, empty, tool_error, protocol_error)} == {version}
    assert (report.state, report.result_kind, report.server_status) == (
        State.ACCEPTED,
        ResultKind.VALUE,
        ServerStatus.COMPLETED,
    )
    payload = world.ledger.result_payload("report")
    assert payload is not None
    assert "rows" in json.dumps(json.loads(payload))
    assert empty.state is State.ACCEPTED
    assert "empty_result" in empty.warnings
    assert (tool_error.state, tool_error.result_kind) == (State.ACCEPTED, ResultKind.TOOL_ERROR)
    assert (protocol_error.state, protocol_error.result_kind) == (
        State.ACCEPTED,
        ResultKind.PROTOCOL_ERROR,
    )
    assert protocol_error.server_status is ServerStatus.FAILED
    assert len(world.ledger.receipts()) == 4


@pytest.mark.parametrize("version", VERSIONS)
async def test_input_answered_by_policy(world: World, version: str) -> None:
    """An input request reaches the policy hook and the task completes with the answer (X4)."""
    world.executor.engine.input_policy = _approve_all  # type: ignore[assignment]
    await world.call("approval", "approve", {"change": "rotate keys"}, protocol=version)
    (record,) = await world.settle("approval")
    assert record.state is State.ACCEPTED, record.reconciliation_reason
    assert record.input_keys_answered
    payload = json.loads(world.ledger.result_payload("approval") or b"null")
    assert "true" in json.dumps(payload).lower()


@pytest.mark.parametrize("version", VERSIONS)
async def test_cancel_mid_flight(world: World, version: str) -> None:
    """A cancel is recorded, sent, and accepted only once the server proves it (X5)."""
    await world.call("long", "sleep_report", {"seconds": 120, "rows": 1}, protocol=version)
    stop_waiting = world.executor.wait_for("long", lambda r: r.state is State.WORKING)
    runner_stop = asyncio.Event()
    runner = asyncio.create_task(world.executor.run(stop=runner_stop))
    try:
        async with asyncio.timeout(LOADED_MACHINE_S):
            await stop_waiting
    finally:
        runner_stop.set()
        await runner
    outcome = world.executor.cancel("long")
    assert (outcome.outcome, outcome.cancel_generation) == ("requested", 1)
    (record,) = await world.settle("long")
    assert record.state is State.CANCELLED_ACCEPTED
    receipt = world.ledger.receipt("long")
    assert receipt is not None
    assert receipt.terminal_status is ServerStatus.CANCELLED
    assert world.executor.cancel("long").outcome == "cancelled"


async def test_sync_tool_is_called_synchronously(world: World) -> None:
    """A task-forbidden tool is answered inline, accepted from SUBMITTING (X10, P5)."""
    await world.call("echo", "echo", {"text": "hi"})
    (record,) = await world.settle("echo")
    assert record.state is State.ACCEPTED
    assert [h.event for h in world.ledger.history("echo")] == ["Created", "ResultFetched"]


async def test_same_node_never_submits_twice(world: World) -> None:
    """Calling a node again attaches to its operation; the server sees one create (X2)."""
    await world.call("once", "sleep_report", {"seconds": 0.2, "rows": 1})
    await world.settle("once")
    await world.call("once", "sleep_report", {"seconds": 0.2, "rows": 1})
    assert world.faults.counts.get("tools/call", 0) == 1
    assert len(world.ledger.receipts()) == 1
