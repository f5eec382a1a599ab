"""Bad AIP-151 input from a crafted real peer: typed, reconciled, nothing accepted (X6, C3, C4)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from tests.protocols.conftest import serve_app
from tests.refusals import escalated_at_once, fetching, not_accepted, refused

from longcall.adapters.aip151 import connect
from longcall.core import OperationRecord, State, handle
from longcall.core import events as e
from longcall.core.machine import DEFAULT_POLICY
from longcall.core.retry import FailureKind, RequestKind

pytestmark = pytest.mark.anyio

STRUCT = "type.googleapis.com/google.protobuf.Struct"
BODIES: dict[str, Any] = {
    "garbled": b'{"name": "operations/garbled", "done": tr',
    "no-type": {"name": "operations/no-type", "done": True, "response": {"value": {"a": 1}}},
    "outside": {"name": "projects/p/things/outside", "done": True, "response": {"@type": STRUCT}},
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


FOREIGN: dict[str, Any] = {
    # Asked about operations/other, the server answers for another operation (C3).
    "other": {"name": "operations/someone-else", "done": False},
    "other-done": {
        "name": "operations/someone-else",
        "done": True,
        "response": {"@type": STRUCT, "value": {"a": 1}},
    },
}
HUGE = {"name": "operations/huge", "done": False, "metadata": {"@type": STRUCT, "pad": "x" * 4096}}
"""An Operation larger than the adapter's response cap in the C4 test."""


async def _operation(request: Request) -> Response:
    op = request.path_params["op"]
    body = {**BODIES, **FOREIGN, "huge": HUGE}[op]
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
        adapter = await connect(base + "/v1")
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
        adapter = await connect(base + "/v1")
        outcome = await adapter.fetch_result(_working(op))
        await adapter.aclose()
    not_accepted(outcome, None)
    escalated_at_once(fetching(_working(op)), outcome.event)


@pytest.mark.parametrize("op", sorted(FOREIGN))
async def test_foreign_operation_on_poll_is_refused_and_escalates_at_once(op: str) -> None:
    """C3: an Operation naming another operation is never read as ours: FOREIGN_IDENTITY,
    never retried, straight to reconciliation with the reason."""
    async with serve_app(APP) as base:
        adapter = await connect(base + "/v1")
        outcome = await adapter.poll(_working(op))
        await adapter.aclose()
    event = refused(outcome, RequestKind.POLL, FailureKind.FOREIGN_IDENTITY)
    assert "operations/someone-else" in event.detail
    escalated_at_once(_working(op), event)


async def test_foreign_operation_on_the_re_fetch_path_is_never_accepted() -> None:
    """C3 on the re-fetch (a restarted process: no cached done Operation): the re-read
    names another, done operation; nothing is accepted and an operator looks."""
    async with serve_app(APP) as base:
        adapter = await connect(base + "/v1")
        outcome = await adapter.fetch_result(_working("other-done"))
        await adapter.aclose()
    event = refused(outcome, RequestKind.FETCH, FailureKind.FOREIGN_IDENTITY)
    escalated_at_once(fetching(_working("other-done")), event)


async def test_an_answer_over_the_size_cap_is_too_large_and_escalates_at_once() -> None:
    """C4: an answer above the response cap is a typed TOO_LARGE failure, never retried
    (asking again brings it again): the operation goes to reconciliation."""
    async with serve_app(APP) as base:
        adapter = await connect(base + "/v1", response_bytes_max=1024)
        polled = await adapter.poll(_working("huge"))
        fetched = await adapter.fetch_result(_working("huge"))
        await adapter.aclose()
    escalated_at_once(_working("huge"), refused(polled, RequestKind.POLL, FailureKind.TOO_LARGE))
    event = refused(fetched, RequestKind.FETCH, FailureKind.TOO_LARGE)
    escalated_at_once(fetching(_working("huge")), event)
