"""The gateway's words for an outcome: who cancelled a call is read from its record."""

from __future__ import annotations

import dataclasses

from longcall.client import CallOutcome, CallResult
from longcall.core import OperationRecord, State
from longcall.gateway.replies import outcome_reply

HANDLE = "lc-abcd-efghj"


def _cancelled(resolved_by: str | None) -> CallResult:
    record = OperationRecord(
        call_node_id="n",
        request_digest="d",
        tool_name="slow",
        tool_descriptor_digest="t",
        principal="anonymous",
        server="s",
        protocol="mcp-tasks",
        adapter_version="1",
        submission_key="lc1-x",
        operation_id="op",
        created_at=0.0,
        updated_at=0.0,
    )
    record = dataclasses.replace(record, state=State.CANCELLED_ACCEPTED, resolved_by=resolved_by)
    return CallResult(
        call_node_id="n",
        outcome=CallOutcome.CANCELLED,
        state=State.CANCELLED_ACCEPTED,
        tool="slow",
        server="s",
        protocol="mcp-tasks",
        operation_id="op",
        server_status=None,
        status_message=None,
        result=None,
        warnings=(),
        receipt=None,
        reason=None,
        input=None,
        record=record,
    )


def _text(result: CallResult) -> str:
    text: str = outcome_reply(HANDLE, result, page=1, page_chars=1000)["content"][0]["text"]
    return text


def test_an_operators_cancellation_is_not_said_to_be_the_upstreams() -> None:
    """Reconciled as cancelled by an operator: the reply names the operator, not the upstream."""
    text = _text(_cancelled("ops:alice"))
    assert "by an operator (ops:alice)" in text
    assert "upstream confirmed" not in text


def test_an_upstream_cancellation_says_the_upstream_confirmed_it() -> None:
    """No operator on the record: the upstream confirmed the cancellation."""
    assert "the upstream confirmed the cancellation" in _text(_cancelled(None))
