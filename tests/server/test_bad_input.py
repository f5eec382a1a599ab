"""Bad input: each malformed request gets a precise JSON-RPC error; no task is made or changed."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from conftest import LegacyClient, ModernClient, mcp_post_scope
from longcall.server import ServerOptions, build_reference_server, running_server

pytestmark = pytest.mark.anyio

MAX_ARGUMENT_BYTES = 2_048
MAX_BODY_BYTES = 16_384


def task_count(store_path: str) -> int:
    """Rows in the task table, read through a separate connection."""
    with sqlite3.connect(store_path) as db:
        return int(db.execute("SELECT count(*) FROM tasks").fetchone()[0])


@pytest.fixture
async def small_limits_url(store_path: str) -> AsyncIterator[str]:
    """The reference server with small argument and body limits."""
    options = ServerOptions(max_argument_bytes=MAX_ARGUMENT_BYTES, max_body_bytes=MAX_BODY_BYTES)
    async with running_server(build_reference_server(store=store_path, options=options)) as url:
        yield url


@pytest.fixture
def client(http: httpx.AsyncClient, small_limits_url: str) -> ModernClient:
    """A 2026-07-28 client of the small-limits server."""
    return ModernClient(http, small_limits_url)


@pytest.mark.parametrize(
    ("params", "code", "fragment"),
    [
        ({"name": "nope", "arguments": {}}, -32602, "Unknown tool"),
        ({"arguments": {}}, -32602, "invalid params"),
        ({"name": "crawl", "arguments": ["not", "an", "object"]}, -32602, "invalid params"),
        (
            {"name": "crawl", "arguments": {"pages": "many", "items_per_page": 1}},
            -32602,
            "invalid arguments",
        ),
        ({"name": "crawl", "arguments": {"pages": 1}}, -32602, "invalid arguments"),
        (
            {"name": "crawl", "arguments": {"pages": 1, "items_per_page": 1, "x": 1}},
            -32602,
            "invalid arguments",
        ),
        (
            {"name": "crawl", "arguments": {"pages": 1, "items_per_page": 1, "blob": "x" * 4000}},
            -32602,
            "limit",
        ),
        ({"name": "fail", "arguments": {"kind": "other"}}, -32602, "invalid arguments"),
    ],
)
async def test_bad_tools_call_creates_nothing(
    client: ModernClient, store_path: str, params: dict[str, Any], code: int, fragment: str
) -> None:
    """Unknown tool, missing name, non-object/invalid/oversized arguments: -32602, no task."""
    error = await client.error(
        "tools/call", params, headers={"mcp-name": str(params.get("name", ""))}
    )
    assert error["code"] == code
    assert fragment in error["message"]
    assert error["httpStatus"] == 400
    assert task_count(store_path) == 0


async def test_invalid_arguments_name_the_field(client: ModernClient) -> None:
    """The -32602 for invalid arguments carries the failing field in ``data``."""
    error = await client.error(
        "tools/call", {"name": "crawl", "arguments": {"pages": "x", "items_per_page": 1}}
    )
    assert error["data"][0]["loc"] == ["pages"]


async def test_malformed_json_and_shapes(
    http: httpx.AsyncClient, small_limits_url: str, store_path: str
) -> None:
    """Parse error -32700, batches and non-JSON-RPC bodies -32600, oversized body -32600 / 413."""
    headers = {"content-type": "application/json", "accept": "application/json"}
    parse = await http.post(small_limits_url, content=b"{not json", headers=headers)
    assert parse.status_code == 400
    assert parse.json()["error"]["code"] == -32700
    batch = await http.post(small_limits_url, json=[{"jsonrpc": "2.0", "id": 1, "method": "ping"}])
    assert batch.json()["error"]["code"] == -32600
    not_rpc = await http.post(small_limits_url, json={"hello": "world"})
    assert not_rpc.json()["error"]["code"] == -32600
    bad_method = await http.post(small_limits_url, json={"jsonrpc": "2.0", "id": 1, "method": 5})
    assert bad_method.json()["error"]["code"] == -32600
    huge = await http.post(small_limits_url, content=b" " * (MAX_BODY_BYTES + 1), headers=headers)
    assert huge.status_code == 413
    assert huge.json()["error"]["code"] == -32600
    assert task_count(store_path) == 0


async def test_non_object_params_and_envelope(
    client: ModernClient, http: httpx.AsyncClient, store_path: str
) -> None:
    """Non-object params and a missing 2026-07-28 envelope key are -32602."""
    headers = client.headers("tools/call", "crawl")
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": ["crawl"]}
    listed = await http.post(client.url, json=body, headers=headers)
    assert listed.json()["error"]["code"] == -32602
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
    body = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "crawl", "_meta": meta},
    }
    missing_caps = await http.post(client.url, json=body, headers=headers)
    assert missing_caps.json()["error"]["code"] == -32602
    assert task_count(store_path) == 0


async def test_unknown_method_is_32601(client: ModernClient) -> None:
    """An unknown method is -32601 (HTTP 404 at 2026-07-28)."""
    error = await client.error("tools/frobnicate", {})
    assert error["code"] == -32601
    assert error["httpStatus"] == 404


async def test_bad_updates_change_nothing(client: ModernClient, store_path: str) -> None:
    """Non-object inputResponses, a non-string taskId, a malformed answer: the task is unchanged."""
    task = await client.create("approve", {"change": "x"})
    before = await client.wait_status(task["taskId"], {"input_required"})
    key = next(iter(before["inputRequests"]))
    for responses in (["x"], 7, "text", {key: "yes"}, {key: {"action": "maybe"}}):
        params = {"taskId": task["taskId"], "inputResponses": responses}
        assert (await client.error("tasks/update", params))["code"] == -32602
    wrong_id = await client.error("tasks/get", {"taskId": 42}, headers={"mcp-name": "42"})
    assert wrong_id["code"] in (-32602, -32020)
    assert await client.get(task["taskId"]) == before
    assert task_count(store_path) == 1


async def test_legacy_bad_input(
    http: httpx.AsyncClient, small_limits_url: str, store_path: str
) -> None:
    """2025-11-25: malformed task params, unknown tool and invalid arguments are -32602, no task."""
    client = LegacyClient(http, small_limits_url)
    bad_task = {
        "name": "crawl",
        "arguments": {"pages": 1, "items_per_page": 1},
        "task": {"ttl": "soon"},
    }
    assert (await client.error("tools/call", bad_task))["code"] == -32602
    assert (await client.error("tools/call", {"name": "nope", "arguments": {}, "task": {}}))[
        "code"
    ] == -32602
    invalid = {"name": "crawl", "arguments": {"pages": -1.5, "items_per_page": 1}, "task": {}}
    assert (await client.error("tools/call", invalid))["code"] == -32602
    assert (await client.error("tasks/get", {}))["code"] == -32602
    assert (await client.error("tasks/get", {"taskId": "x" * 43}))["code"] == -32602
    assert task_count(store_path) == 0


async def test_a_client_gone_mid_body_is_refused_not_an_internal_error(
    store_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that disconnects before its body is complete (a process exiting with a
    request on the wire) gets the refusal for an incomplete request, counted; the server
    logs no internal error for it."""
    server = build_reference_server(store=store_path)
    app = server.asgi_app()
    incoming: list[dict[str, Any]] = [
        {"type": "http.request", "body": b'{"jsonrpc": "2.0", "id": 1, "meth', "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = mcp_post_scope((b"content-length", b"4096"))
    with caplog.at_level(logging.WARNING):
        await app(scope, receive, send)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert sent[0]["status"] == 400
    assert b"ended early" in b"".join(m.get("body", b"") for m in sent[1:])
