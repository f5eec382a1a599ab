"""Bad Apify-style input from a crafted real peer over HTTP on 127.0.0.1: typed,
reconciled, nothing accepted (C3, C4, X6).

Regressions: a JSON-RPC error with ``id: null`` (the server could not read our request)
was read as the answer to our start and kept as the call's rejected outcome; a run view
naming another run was read as ours on the re-fetch; an answer of any size was read
into memory.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from tests.protocols.conftest import serve_app
from tests.refusals import escalated_at_once, fetching, refused

from longcall.adapters.apify import connect
from longcall.core import OperationRecord, State
from longcall.core.retry import FailureKind, RequestKind

pytestmark = pytest.mark.anyio

RUN = "run-ours"
Tool = Callable[[dict[str, Any]], Response | dict[str, Any]]


def run_view(run_id: str, status: str, items: int = 1) -> dict[str, Any]:
    return {
        "runId": run_id,
        "status": status,
        "storages": {"datasets": {"default": {"id": f"dataset-{run_id}", "itemCount": items}}},
    }


def structured(value: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": json.dumps(value)}],
            "structuredContent": value, "isError": False}  # fmt: skip


def refused_unread(status: int) -> Response:
    """What a strict Streamable HTTP server answers a request it could not read."""
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32602, "message": "Not Acceptable"}}
    return JSONResponse(body, status_code=status)


HELPER = {"inputSchema": {"type": "object"}}
TOOLS = [{"name": n, **HELPER} for n in ("get-actor-run", "get-dataset-items", "abort-actor-run",
                                         "longcall--report")]  # fmt: skip


def app(tools: dict[str, Tool]) -> Starlette:
    """A minimal Apify-style MCP endpoint whose tools behave as ``tools`` says."""

    async def endpoint(request: Request) -> Response:
        message = json.loads(await request.body())
        if "id" not in message:
            return Response(status_code=202)
        method, params = message["method"], message.get("params") or {}
        if method == "initialize":
            result: Any = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}}
        elif method == "tools/list":
            result = {"tools": TOOLS}
        else:
            result = tools[params["name"]](params.get("arguments") or {})
            if isinstance(result, Response):
                return result
        return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "result": result})

    return Starlette(routes=[Route("/apify/mcp", endpoint, methods=["POST"])])


def _record(op: str | None) -> OperationRecord:
    return OperationRecord(
        call_node_id="node",
        request_digest="d",
        tool_name="longcall--report",
        tool_descriptor_digest="t",
        principal="anonymous",
        server="s",
        protocol="apify",
        adapter_version="1",
        submission_key="lc1-k",
        operation_id=op,
        state=State.WORKING if op else State.SUBMITTING,
        created_at=0.0,
        updated_at=0.0,
    )


@pytest.mark.parametrize("status", [400, 406])
async def test_an_error_with_a_null_id_is_a_transport_failure_never_an_outcome(
    status: int,
) -> None:
    """C3: the start and the poll answered by an error about no request of ours: a
    request failure (nothing was processed), never a rejected start kept as the outcome."""
    peer = app({"longcall--report": lambda _a: refused_unread(status),
                "get-actor-run": lambda _a: refused_unread(status)})  # fmt: skip
    async with serve_app(peer) as base:
        adapter = await connect(base + "/apify/mcp")
        started = await adapter.submit(_record(None), {"rows": 1})
        polled = await adapter.poll(_record(RUN))
        await adapter.aclose()
    refused(started, RequestKind.SUBMIT, FailureKind.BAD_REQUEST)
    refused(polled, RequestKind.POLL, FailureKind.BAD_REQUEST)


async def test_a_run_id_mismatch_on_the_re_fetch_is_never_accepted() -> None:
    """C3: after a restart the fetch re-reads the run; the server answers for another,
    finished run: nothing is accepted, an operator looks at once."""
    peer = app({
        "get-actor-run": lambda _a: structured(run_view("run-someone-else", "SUCCEEDED", 0)),
        "get-dataset-items": lambda _a: pytest.fail("no page of a run not ours is read"),
    })  # fmt: skip
    async with serve_app(peer) as base:
        adapter = await connect(base + "/apify/mcp")
        outcome = await adapter.fetch_result(_record(RUN))
        await adapter.aclose()
    event = refused(outcome, RequestKind.FETCH, FailureKind.FOREIGN_IDENTITY)
    escalated_at_once(fetching(_record(RUN)), event)


async def test_an_oversized_page_is_too_large_and_escalates_at_once() -> None:
    """C4: a dataset page above the response cap is a typed TOO_LARGE failure, never
    retried (asking again brings it again): the operation goes to reconciliation."""
    page = {"items": [{"blob": "x" * 8192}], "offset": 0, "itemCount": 1, "totalItemCount": 1}
    peer = app({
        "get-actor-run": lambda _a: structured(run_view(RUN, "SUCCEEDED", 1)),
        "get-dataset-items": lambda _a: {"content": [], "structuredContent": page},
    })  # fmt: skip
    async with serve_app(peer) as base:
        adapter = await connect(base + "/apify/mcp", response_bytes_max=4096)
        outcome = await adapter.fetch_result(_record(RUN))
        await adapter.aclose()
    event = refused(outcome, RequestKind.FETCH, FailureKind.TOO_LARGE)
    escalated_at_once(fetching(_record(RUN)), event)
