"""Golden mapping tables per protocol version: one wire reply -> the expected core event
(X6, X9; fixtures in tests/adapters/fixtures/). The HTTP exchange is served by an httpx
mock transport so every reply — garbled, truncated, refused — is exact."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from longcall.adapters.base import Adapter
from longcall.adapters.http import HttpDriver
from longcall.adapters.mcp.client import adapter_for
from longcall.adapters.mcp.legacy import LegacyMapping
from longcall.adapters.mcp.modern import ModernMapping
from longcall.core import OperationRecord
from longcall.core.keys import canonical_json, digest_bytes
from longcall.core.record import ServerStatus

pytestmark = pytest.mark.anyio

FIXTURES = Path(__file__).parent / "fixtures"
URL = "http://golden.invalid/mcp"
LOOKUP = {"dev.longcall/submissionKey": {"lookupMethod": "longcall/tasks/lookup"}}


def _cases(name: str) -> list[Any]:
    data = json.loads((FIXTURES / name).read_text())
    return [pytest.param(data, case, id=case["name"]) for case in data["cases"]]


def _response(reply: Mapping[str, Any], request: httpx.Request) -> httpx.Response:
    if "exception" in reply:
        raise getattr(httpx, reply["exception"])("injected", request=request)
    body = json.loads(request.content)
    status = reply.get("status", 200)
    headers = dict(reply.get("headers", {}))
    if "sse" in reply:
        text = "".join(f"event: message\ndata: {json.dumps(m)}\n\n" for m in reply["sse"])
        headers["content-type"] = "text/event-stream"
        return httpx.Response(status, headers=headers, content=text.encode())
    if "json" in reply:
        message = {"jsonrpc": "2.0", "id": reply.get("id", body.get("id")), "result": reply["json"]}
        return httpx.Response(status, headers=headers, json=message)
    if "json_error" in reply:
        error_id = reply["id"] if "id" in reply else body.get("id")
        message = {"jsonrpc": "2.0", "id": error_id, "error": reply["json_error"]}
        return httpx.Response(status, headers=headers, json=message)
    return httpx.Response(status, headers=headers, content=reply.get("text", "").encode())


def _adapter(data: Mapping[str, Any], case: Mapping[str, Any]) -> Adapter:
    def handler(request: httpx.Request) -> httpx.Response:
        # Streamable HTTP: every POST accepts both media types (tasks/result included).
        accepted = {part.strip() for part in request.headers["accept"].split(",")}
        assert {"application/json", "text/event-stream"} <= accepted, request.headers
        body = json.loads(request.content)
        method = body.get("method")
        if method == "tools/list":
            message = {"jsonrpc": "2.0", "id": body["id"], "result": {"tools": data["tools"]}}
            return httpx.Response(200, json=message)
        replies = case.get("replies")
        reply = replies.get(method) if replies else case["reply"]
        assert reply is not None, f"no reply for {method}"
        return _response(reply, request)

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    driver = HttpDriver(URL, http=http)
    if data["protocol"] == "2026-07-28":
        discovered = {
            "capabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}, **LOOKUP}}
        }
        return adapter_for(ModernMapping(URL, discovered=discovered), driver)
    initialized = {"capabilities": {"experimental": LOOKUP}}
    return adapter_for(LegacyMapping(URL, initialized=initialized), driver)


def _record(data: Mapping[str, Any], case: Mapping[str, Any]) -> OperationRecord:
    fields: dict[str, Any] = {
        "call_node_id": "golden",
        "request_digest": "sha256:0",
        "tool_name": "report",
        "tool_descriptor_digest": "sha256:0",
        "principal": "p",
        "server": URL,
        "protocol": data["protocol"],
        "adapter_version": "1",
        "submission_key": "lc1-golden",
        "operation_id": None if case["call"] in ("submit", "lookup") else "t1",
        "created_at": 0.0,
        "updated_at": 0.0,
    }
    for key, value in case.get("record", {}).items():
        fields[key] = ServerStatus(value) if key == "server_status" else value
    return OperationRecord(**fields)


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value


async def _run(data: Mapping[str, Any], case: Mapping[str, Any]) -> None:
    adapter = _adapter(data, case)
    record = _record(data, case)
    call = case["call"]
    try:
        if call == "submit":
            outcome = await adapter.submit(record, {"rows": 1})
        elif call == "send_input":
            outcome = await adapter.send_input(record, {"k": {"action": "accept"}})
        else:
            outcome = await getattr(adapter, {"fetch": "fetch_result"}.get(call, call))(record)
    finally:
        await adapter.aclose()
    expect = case["expect"]
    if expect is None:
        assert outcome is None
        return
    assert outcome is not None
    assert outcome.event.name == expect["event"], outcome
    for field, value in expect.get("fields", {}).items():
        assert _plain(getattr(outcome.event, field)) == value, field
    if "payload" in expect:
        assert outcome.payload == canonical_json(expect["payload"])
    digest = getattr(outcome.event, "result_digest", None)
    if digest is not None:
        # X6: the digest is over the canonical JSON of exactly the payload we keep.
        assert outcome.payload is not None
        assert digest == digest_bytes(outcome.payload)


@pytest.mark.parametrize(("data", "case"), _cases("mcp_tasks_2026_07_28.json"))
async def test_mapping_2026_07_28(data: Mapping[str, Any], case: Mapping[str, Any]) -> None:
    """P1: a wire reply maps to exactly the fixture's event (and payload)."""
    await _run(data, case)


@pytest.mark.parametrize(("data", "case"), _cases("mcp_tasks_2025_11_25.json"))
async def test_mapping_2025_11_25(data: Mapping[str, Any], case: Mapping[str, Any]) -> None:
    """P2: a wire reply maps to exactly the fixture's event (and payload)."""
    await _run(data, case)


async def test_a_terminal_poll_that_inlined_the_result_holds_it_until_fetched() -> None:
    """2026-07-28: a poll whose terminal reply inlined the result leaves it in hand, so
    the fetch that follows sends nothing (the executor does not wait for a send slot
    for it); a working poll holds nothing, and the fetch uses the result up."""
    data = json.loads((FIXTURES / "mcp_tasks_2026_07_28.json").read_text())
    cases = {case["name"]: case for case in data["cases"]}
    working = cases["poll: working, same message"]
    completed = cases["poll: completed (result inlined)"]
    record = _record(data, completed)
    adapter = _adapter(data, working)
    try:
        await adapter.poll(_record(data, working))
        assert not adapter.holds_result(record)
    finally:
        await adapter.aclose()
    adapter = _adapter(data, completed)
    try:
        outcome = await adapter.poll(record)
        assert outcome.event.name == "TerminalObserved"
        assert adapter.holds_result(record)
        await adapter.fetch_result(record)
        assert not adapter.holds_result(record)
    finally:
        await adapter.aclose()
