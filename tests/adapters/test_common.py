"""Shared pieces: Retry-After, the empty-result rule, event-stream replies with progress,
and negotiation fallbacks against scripted servers (X1, X3, X6, X11)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from longcall.adapters.exchange import parse_retry_after
from longcall.adapters.mcp.client import McpTasks20251125Adapter, SyncAdapter, connect
from longcall.adapters.mcp.results import is_empty_result
from longcall.core.events import ResultFetched
from longcall.errors import NegotiationFailed

from .conftest import Driver

URL = "http://scripted.invalid/mcp"


def test_retry_after_forms() -> None:
    """Retry-After as delta-seconds or as an HTTP date; garbage is ignored (X3)."""
    now = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("Sun, 29 Nov 2026 12:00:30 GMT", now=now) == 30.0
    assert parse_retry_after("Sun, 29 Nov 2026 11:00:00 GMT", now=now) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


@pytest.mark.parametrize(
    ("result", "empty"),
    [
        ({"content": []}, True),
        ({"content": [{"type": "text", "text": ""}]}, True),
        ({"content": [{"type": "text", "text": "x"}]}, False),
        ({"content": [], "structuredContent": {"items": []}}, True),
        ({"content": [], "structuredContent": {"items": [], "pages": 0}}, True),
        ({"content": [], "structuredContent": {"items": ["a"], "pages": 1}}, False),
        ({"content": [], "structuredContent": {"approved": False}}, False),
        ({"content": [], "structuredContent": {}}, True),
    ],
)
def test_empty_result_rule(result: dict[str, Any], empty: bool) -> None:
    """No content, or structured content holding only empty collections, is empty (X6)."""
    assert is_empty_result(result) is empty


def _scripted(answer: Callable[[dict[str, Any]], httpx.Response]) -> httpx.AsyncClient:
    def handler(request: httpx.Request) -> httpx.Response:
        return answer(json.loads(request.content))

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


def _ok(body: dict[str, Any], result: dict[str, Any]) -> httpx.Response:
    return httpx.Response(200, json={"jsonrpc": "2.0", "id": body.get("id"), "result": result})


def _error(body: dict[str, Any], code: int, status: int = 200) -> httpx.Response:
    error = {"code": code, "message": "nope"}
    return httpx.Response(status, json={"jsonrpc": "2.0", "id": body.get("id"), "error": error})


TOOLS = {"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}


@pytest.mark.anyio
async def test_modern_server_without_tasks_gets_sync() -> None:
    """discover without the tasks extension -> the sync adapter at 2026-07-28 (X1)."""

    def answer(body: dict[str, Any]) -> httpx.Response:
        if body.get("method") == "server/discover":
            return _ok(body, {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}})
        if body.get("method") == "tools/list":
            return _ok(body, TOOLS)
        return _error(body, -32601, 404)

    async with _scripted(answer) as http:
        adapter = await connect(URL, http=http)
        assert isinstance(adapter, SyncAdapter)
        assert adapter.protocol == "2026-07-28/sync"
        assert (await adapter.bind("t")).task_support == "forbidden"


@pytest.mark.anyio
async def test_legacy_only_server_gets_p2() -> None:
    """discover unknown (-32601), initialize with tasks.requests.tools.call -> P2 (X1)."""
    caps = {"tasks": {"requests": {"tools": {"call": {}}}}}

    def answer(body: dict[str, Any]) -> httpx.Response:
        if body.get("method") == "initialize":
            return _ok(body, {"protocolVersion": "2025-11-25", "capabilities": caps})
        if "method" in body and "id" not in body:
            return httpx.Response(202)
        return _error(body, -32601)

    async with _scripted(answer) as http:
        adapter = await connect(URL, http=http)
        assert isinstance(adapter, McpTasks20251125Adapter)
        assert adapter.mapping.submission_lookup is False


@pytest.mark.anyio
async def test_nothing_answers_is_a_negotiation_failure() -> None:
    """Neither discover nor initialize answers: a clear NegotiationFailed (X1)."""
    async with _scripted(lambda body: httpx.Response(404, text="no mcp here")) as http:
        with pytest.raises(NegotiationFailed):
            await connect(URL, http=http)


@pytest.mark.anyio
async def test_event_stream_reply_reports_progress() -> None:
    """An SSE reply: progress notifications reach the sink before the answer (X11)."""
    reports: list[tuple[str, float | None, str | None]] = []

    def answer(body: dict[str, Any]) -> httpx.Response:
        if body.get("method") == "server/discover":
            return _ok(body, {"supportedVersions": ["2026-07-28"], "capabilities": {}})
        if body.get("method") == "tools/list":
            return _ok(body, TOOLS)
        token = body["params"]["_meta"]["progressToken"]
        messages = [
            {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": token, "progress": 1, "total": 4, "message": "1/4"},
            },
            {"jsonrpc": "2.0", "id": body["id"], "result": {"content": [], "isError": False}},
        ]
        text = "".join(f"event: message\ndata: {json.dumps(m)}\n\n" for m in messages)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=text)

    async with _scripted(answer) as http:
        adapter = await connect(URL, http=http, progress=lambda *r: reports.append(r))
        driver = Driver(adapter, await adapter.bind("t"), {})
        outcome = await adapter.submit(driver.record, {})
    assert isinstance(outcome.event, ResultFetched)
    assert outcome.event.empty is True
    assert outcome.progress == 0.25
    assert reports == [(driver.record.call_node_id, 0.25, "1/4")]
