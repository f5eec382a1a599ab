"""Bad AIP-151 input from a crafted real peer: typed, reconciled, nothing accepted (X6)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from tests.protocols.conftest import serve_app

from longcall.adapters.aip151 import Aip151Adapter
from longcall.core import OperationRecord, ServerStatus, State, handle
from longcall.core import events as e
from longcall.core.machine import DEFAULT_POLICY
from longcall.core.retry import FailureKind

pytestmark = pytest.mark.anyio

STRUCT = "type.googleapis.com/google.protobuf.Struct"
BODIES: dict[str, Any] = {
    "garbled": b'{"name": "operations/garbled", "done": tr',
    "no-type": {"name": "operations/no-type", "done": True, "response": {"value": {"a": 1}}},
    "outside": {"name": "projects/p/things/outside", "done": True, "response": {"@type": STRUCT}},
    "other": {"name": "operations/someone-else", "done": False},
    "extra": {"name": "operations/extra", "done": False, "createTime": "2026-01-01T00:00:00Z"},
    "both": {
        "name": "operations/both",
        "done": True,
        "response": {"@type": STRUCT, "value": {}},
        "error": {"code": 2, "message": "x"},
    },
    "detail-no-type": {
        "name": "operations/detail-no-type",
        "done": True,
        "error": {"code": 13, "message": "x", "details": [{"reason": "R"}]},
    },
}


async def _operation(request: Request) -> Response:
    body = BODIES[request.path_params["op"]]
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Response(raw, media_type="application/json")


APP = Starlette(routes=[Route("/v1/operations/{op}", _operation)])


def _working(op: str) -> OperationRecord:
    return OperationRecord(
        call_node_id=f"node-{op}",
        request_digest="d",
        tool_name="t",
        tool_descriptor_digest="t",
        principal="anonymous",
        server="s",
        protocol="aip-151",
        adapter_version="1",
        submission_key="lc1-k",
        operation_id=f"operations/{op}",
        state=State.WORKING,
        created_at=0.0,
        updated_at=0.0,
    )


@pytest.mark.parametrize("op", sorted(BODIES))
async def test_bad_operation_on_poll_is_malformed_and_ends_in_reconciliation(op: str) -> None:
    """A bad Operation polls as RequestFailed(MALFORMED); spent retries escalate with the reason."""
    async with serve_app(APP) as base:
        adapter = Aip151Adapter(base + "/v1")
        outcome = await adapter.poll(_working(op))
        await adapter.aclose()
    event = outcome.event
    assert isinstance(event, e.RequestFailed)
    assert event.failure is FailureKind.MALFORMED_RESPONSE
    record = _working(op)
    for attempt in range(DEFAULT_POLICY.retry.attempts_max + 1):
        record = handle(record, event, now=float(attempt), jitter=0.5).record
    assert record.state is State.RECONCILIATION_REQUIRED
    assert record.reconciliation_reason is not None
    assert event.detail in record.reconciliation_reason
    assert record.result_digest is None


@pytest.mark.parametrize("op", ["no-type", "outside", "both", "detail-no-type"])
async def test_bad_operation_on_fetch_escalates_at_once(op: str) -> None:
    """A bad done Operation met by the result fetch: ResultFetchFailed, not retried, no receipt."""
    async with serve_app(APP) as base:
        adapter = Aip151Adapter(base + "/v1")
        outcome = await adapter.fetch_result(_working(op))
        await adapter.aclose()
    assert isinstance(outcome.event, e.ResultFetchFailed)
    assert outcome.event.retryable is False
    assert outcome.payload is None
    fetching = handle(
        handle(
            _working(op),
            e.TerminalObserved(status=ServerStatus.COMPLETED),
            now=1.0,
            jitter=0.5,
        ).record,
        e.ResultFetchStarted(),
        now=2.0,
        jitter=0.5,
    ).record
    escalated = handle(fetching, outcome.event, now=3.0, jitter=0.5)
    assert escalated.record.state is State.RECONCILIATION_REQUIRED
    assert outcome.event.reason in (escalated.record.reconciliation_reason or "")
    assert not any(type(c).__name__ == "AcceptTerminal" for c in escalated.commands)
