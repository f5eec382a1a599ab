"""Hostile input on all three endpoints: a typed 4xx in the endpoint's own shape, never a 500.

Every case here was answered with HTTP 500 plain text, or served, before the one front door
(``longcall.server.front``) stood in front of ``/mcp``, ``/v1`` and ``/apify/mcp``.
"""

from __future__ import annotations

import base64
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from tests.bounds import LOADED_MACHINE_S

from conftest import ModernClient
from longcall.server import (
    LongcallServer,
    ServerOptions,
    StaticTokens,
    build_reference_server,
    running_server,
)

pytestmark = pytest.mark.anyio

MAX_BODY_BYTES = 64 * 1024
MAX_ARGUMENT_BYTES = 4 * 1024
MAX_RESULT_BYTES = 8 * 1024
JSON_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
DEEP = b"[" * 30_000 + b"]" * 30_000


def task_count(store_path: str) -> int:
    """Rows in the task table, read through a separate connection."""
    with sqlite3.connect(store_path) as db:
        return int(db.execute("SELECT count(*) FROM tasks").fetchone()[0])


class Endpoints:
    """The three endpoints of one reference server."""

    def __init__(self, mcp_url: str) -> None:
        base = mcp_url.removesuffix("/mcp")
        self.mcp = mcp_url
        self.v1 = f"{base}/v1"
        self.apify = f"{base}/apify/mcp"

    def rpc_urls(self) -> list[str]:
        return [self.mcp, self.apify]


@pytest.fixture
async def endpoints(store_path: str) -> AsyncIterator[Endpoints]:
    """The reference server with small caps, on a free loopback port."""
    options = ServerOptions(
        max_body_bytes=MAX_BODY_BYTES,
        max_argument_bytes=MAX_ARGUMENT_BYTES,
        max_result_bytes=MAX_RESULT_BYTES,
        allowed_origins=frozenset({"https://console.example.org"}),
    )
    server = build_reference_server(
        store=store_path, options=options, authenticator=StaticTokens({"a": "alice", "b": "bob"})
    )
    async with running_server(server) as url:
        yield Endpoints(url)


def auth(token: str = "a", **extra: str) -> dict[str, str]:
    return {**JSON_HEADERS, "authorization": f"Bearer {token}", **extra}


def call(tool: str, arguments: Any, request_id: Any = 1) -> dict[str, Any]:
    """A 2025-11-25-style ``tools/call`` body (both JSON-RPC endpoints take it)."""
    params = {"name": tool, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def test_foreign_origin_and_host_get_403_everywhere(
    http: httpx.AsyncClient, endpoints: Endpoints
) -> None:
    """DNS rebinding: a foreign Origin or Host is 403 on every endpoint; loopback is served."""
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    for url in endpoints.rpc_urls():
        evil = await http.post(url, json=ping, headers=auth(origin="http://evil.example.com"))
        assert evil.status_code == 403, url
        assert evil.json()["error"]["code"] == -32600
        rebound = await http.post(url, json=ping, headers=auth(host="evil.example.com"))
        assert rebound.status_code == 403, url
        local = await http.post(url, json=ping, headers=auth(origin="http://localhost:3000"))
        assert local.status_code == 200, url
        allowed = await http.post(
            url, json=ping, headers=auth(origin="https://console.example.org")
        )
        assert allowed.status_code == 200, url
    v1 = await http.get(
        f"{endpoints.v1}/operations", headers=auth(origin="http://evil.example.com")
    )
    assert v1.status_code == 403
    assert v1.json()["error"]["status"] == "PERMISSION_DENIED"
    get_stream = await http.get(
        endpoints.mcp, headers=auth(origin="null", accept="text/event-stream")
    )
    assert get_stream.status_code == 403


async def test_null_id_media_types_and_accept(
    http: httpx.AsyncClient, endpoints: Endpoints, store_path: str
) -> None:
    """``id: null`` is -32600; text/plain is 415; no Accept is 406; nothing is created."""
    for url in endpoints.rpc_urls():
        null_id = await http.post(
            url, json=call("crawl", {"pages": 0, "items_per_page": 0}, None), headers=auth()
        )
        assert null_id.status_code == 400, url
        assert null_id.json()["error"]["code"] == -32600
        plain = await http.post(
            url,
            content=b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
            headers={**auth(), "content-type": "text/plain"},
        )
        assert plain.status_code == 415, url
        request = http.build_request(
            "POST", url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}
        )
        del request.headers["accept"]
        request.headers["authorization"] = "Bearer a"
        assert (await http.send(request)).status_code == 406, url
    assert task_count(store_path) == 0


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (DEEP, "nested deeper"),
        (
            (
                b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo",'
                b'"arguments":{"text":"\\ud800"}}}'
            ),
            "surrogate",
        ),
        (
            (
                b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x",'
                b'"arguments":{"n":1e400}}}'
            ),
            "out of range",
        ),
        (
            (
                b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x",'
                b'"arguments":{"n":NaN}}}'
            ),
            "NaN",
        ),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"n":' + b"9" * 5000 + b"}}",
            "Parse error",
        ),
    ],
    ids=["deep", "surrogate", "1e400", "nan", "5000-digit-int"],
)
async def test_unparseable_json_is_a_parse_error_on_every_endpoint(
    http: httpx.AsyncClient, endpoints: Endpoints, store_path: str, body: bytes, fragment: str
) -> None:
    """Deep nesting, lone surrogates, non-finite and huge numbers: 400 + -32700 (AIP-193 on /v1)."""
    for url in endpoints.rpc_urls():
        reply = await http.post(url, content=body, headers=auth())
        assert reply.status_code == 400, (url, reply.text[:200])
        assert reply.json()["error"]["code"] == -32700
        assert fragment in reply.json()["error"]["message"]
    start = await http.post(f"{endpoints.v1}/tools/crawl:start", content=body, headers=auth())
    assert start.status_code == 400, start.text[:200]
    assert start.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert task_count(store_path) == 0


async def test_apify_numbers_out_of_range_are_argument_errors(
    http: httpx.AsyncClient, endpoints: Endpoints
) -> None:
    """Apify ``limit``/``offset``/``waitSecs`` as huge or non-finite strings: -32602, not 500."""
    started = await http.post(
        endpoints.apify,
        json=call("longcall--crawl", {"pages": 1, "items_per_page": 1, "waitSecs": 5}),
        headers=auth(),
    )
    run = started.json()["result"]["structuredContent"]
    dataset = run["storages"]["datasets"]["default"]["id"]
    for arguments in (
        {"datasetId": dataset, "limit": "1.0e400"},
        {"datasetId": dataset, "offset": "-1.5e999"},
        {"datasetId": dataset, "limit": "9" * 5000},
    ):
        reply = await http.post(
            endpoints.apify, json=call("get-dataset-items", arguments), headers=auth()
        )
        assert reply.status_code == 200, reply.text[:200]
        assert reply.json()["error"]["code"] == -32602
    for wait in ("Infinity", "NaN", "1.0e400"):
        reply = await http.post(
            endpoints.apify,
            json=call("get-actor-run", {"runId": run["runId"], "waitSecs": wait}),
            headers=auth(),
        )
        assert reply.json()["error"]["code"] == -32602, wait


@pytest.mark.parametrize("page_size", ["9" * 5000, "²", "-1", "1.5", "0x10"])
async def test_v1_page_size_is_checked(
    http: httpx.AsyncClient, endpoints: Endpoints, page_size: str
) -> None:
    """A ``pageSize`` that is not a plain ASCII integer is 400 INVALID_ARGUMENT."""
    reply = await http.get(
        f"{endpoints.v1}/operations", params={"pageSize": page_size}, headers=auth()
    )
    assert reply.status_code == 400
    assert reply.json()["error"]["status"] == "INVALID_ARGUMENT"


async def test_body_and_argument_caps_hold_on_every_endpoint(
    http: httpx.AsyncClient, endpoints: Endpoints, store_path: str
) -> None:
    """The body cap (413) and the argument cap (-32602 / 400) hold on /mcp, /v1 and Apify."""
    big_body = b'{"pad":"' + b"x" * MAX_BODY_BYTES + b'"}'
    for url in [*endpoints.rpc_urls(), f"{endpoints.v1}/tools/crawl:start"]:
        reply = await http.post(url, content=big_body, headers=auth())
        assert reply.status_code == 413, url
    blob = "y" * (MAX_ARGUMENT_BYTES + 10)
    arguments = {"pages": 0, "items_per_page": 0, "blob": blob}
    legacy_task = call("crawl", arguments) | {
        "params": {"name": "crawl", "arguments": arguments, "task": {}}
    }
    mcp = await http.post(
        endpoints.mcp, json=legacy_task, headers={**auth(), "mcp-protocol-version": "2025-11-25"}
    )
    assert mcp.json()["error"]["code"] == -32602
    assert "limit" in mcp.json()["error"]["message"]
    apify = await http.post(
        endpoints.apify, json=call("longcall--approve", {"change": blob}), headers=auth()
    )
    assert apify.json()["error"]["code"] == -32602
    v1 = await http.post(
        f"{endpoints.v1}/tools/sleep_report:start",
        json={"arguments": {"seconds": 0, "rows": 0, "note": blob}},
        headers=auth(),
    )
    assert v1.status_code == 400
    assert task_count(store_path) == 0


async def test_unbounded_arguments_are_refused_and_results_are_capped(
    http: httpx.AsyncClient, endpoints: Endpoints, store_path: str
) -> None:
    """``crawl(pages=10**20)`` is -32602; a result over the cap ends the task failed, not stored."""
    client = ModernClient(http, endpoints.mcp, token="a")
    huge = await client.error(
        "tools/call", {"name": "crawl", "arguments": {"pages": 10**20, "items_per_page": 1}}
    )
    assert huge["code"] == -32602
    assert task_count(store_path) == 0
    task = await client.create("crawl", {"pages": 1000, "items_per_page": 100})
    done = await client.wait_status(
        task["taskId"], {"completed", "failed"}, limit_s=LOADED_MACHINE_S
    )
    assert done["status"] == "failed"
    assert "bytes" in done["error"]["message"]
    assert done["error"]["data"]["limitBytes"] == MAX_RESULT_BYTES
    with sqlite3.connect(store_path) as db:
        (stored,) = db.execute("SELECT result FROM tasks WHERE task_id = ?", (task["taskId"],))
    assert stored[0] is None


async def test_v1_page_token_reveals_nothing_of_another_principal(
    http: httpx.AsyncClient, endpoints: Endpoints
) -> None:
    """A page token naming bob's operation reads exactly like garbage to alice."""
    started = await http.post(
        f"{endpoints.v1}/tools/crawl:start",
        json={"arguments": {"pages": 0, "items_per_page": 0}},
        headers=auth("b"),
    )
    bobs = started.json()["name"].removeprefix("operations/")
    token = base64.urlsafe_b64encode(bobs.encode()).decode().rstrip("=")
    answers = []
    for candidate in (token, "garbage-token", base64.urlsafe_b64encode(b"nope").decode()):
        reply = await http.get(
            f"{endpoints.v1}/operations", params={"pageToken": candidate}, headers=auth("a")
        )
        answers.append((reply.status_code, reply.json()["error"]["message"]))
    assert answers == [(400, "invalid pageToken")] * 3
    own = await http.get(
        f"{endpoints.v1}/operations", params={"pageToken": token}, headers=auth("b")
    )
    assert own.status_code == 200


async def test_tool_exception_text_stays_in_the_log(
    http: httpx.AsyncClient, store_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An unexpected exception's text (which may hold secrets) is logged, not sent to callers."""
    server = LongcallServer(store=store_path)

    @server.tool(task="optional")
    async def leaky() -> str:
        raise RuntimeError("password=hunter2 at db.internal:5432")

    async with running_server(server) as url:
        client = ModernClient(http, url)
        sync = await client.result("tools/call", {"name": "leaky", "arguments": {}}, consent=False)
        task = await client.create("leaky", {})
        done = await client.wait_status(task["taskId"], {"completed"})
    for result in (sync, done["result"]):
        text = result["content"][0]["text"]
        assert result["isError"] is True
        assert "hunter2" not in text
        assert "internal error" in text
        reference = text.rsplit("ref ", 1)[1].rstrip(").")
        assert any(reference in record.getMessage() for record in caplog.records)
    assert "hunter2" in caplog.text
