"""An operator's outcome is accepted as the kind its bytes carry, read by the rules of
the operation's protocol: the same result as a tool error whether the engine fetched it
or an operator supplied it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.core.builders import T0, new_record

from longcall import CallOutcome, Client, State
from longcall.adapters.mcp.rpc import MODERN
from longcall.core import events as e
from longcall.ledger import SQLiteLedger
from longcall.runtime.step import apply_event

pytestmark = pytest.mark.anyio

TEXT = [{"type": "text", "text": "the disk is full"}]


def _waiting_for_an_operator(path: Path, node: str) -> None:
    """An MCP 2026-07-28 operation in reconciliation, its create's outcome unknown."""
    record = new_record(call_node_id=node, protocol=MODERN)
    with SQLiteLedger(path) as ledger:
        record = ledger.create(record)
        event = e.ReconciliationEscalated(reason="create outcome unknown")
        record = apply_event(ledger, record, event, now=T0 + 1, jitter=0.5).record
        assert record.state is State.RECONCILIATION_REQUIRED


@pytest.mark.parametrize(
    ("resolution", "result", "outcome"),
    [
        ("completed", {"content": TEXT, "isError": True}, CallOutcome.TOOL_ERROR),
        ("completed", {"content": TEXT, "isError": False}, CallOutcome.OK),
        ("failed", {"code": -32603, "message": "internal"}, CallOutcome.PROTOCOL_ERROR),
        ("failed", {"content": TEXT, "isError": True}, CallOutcome.TOOL_ERROR),
        ("failed", {"why": "checked by hand"}, CallOutcome.TOOL_ERROR),
    ],
)
async def test_an_operator_s_result_is_accepted_as_the_kind_it_carries(
    tmp_path: Path, resolution: str, result: dict[str, Any], outcome: CallOutcome
) -> None:
    path = tmp_path / "ledger.db"
    _waiting_for_an_operator(path, "n")
    async with Client(f"sqlite:///{path}") as client:
        settled = await client.reconcile("n", resolution, note="checked", actor="op", result=result)
    assert settled.state is State.ACCEPTED
    assert settled.outcome is outcome
    assert settled.result == result
