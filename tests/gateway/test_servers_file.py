"""What the servers file and the host's request decide at the gateway: an ``mcpServers``
JSON servers file with an allow-list of tools and a per-server credential (which reaches
the upstream and never the ledger, the task store or a log), ``longcall_status``'s wait
capped at the window, and upstream progress forwarded over Streamable HTTP to a host that
sent a ``progressToken``."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from conftest import (
    BOUND_S,
    LEGACY,
    WINDOW_S,
    Host,
    Upstream,
    gateway_at,
    text_of,
    upstream_server,
)
from longcall.adapters.servers import load_servers
from longcall.gateway import Gateway
from longcall.server import StaticTokens, running_server

pytestmark = pytest.mark.anyio

TOKEN_VARIABLE = "LONGCALL_TEST_UPSTREAM_TOKEN"
ALLOWED = ["slow", "quick"]


@pytest.fixture
def upstream_token(monkeypatch: pytest.MonkeyPatch) -> str:
    """The upstream's bearer token, in the environment the servers file names."""
    token = f"up-secret-{secrets.token_hex(12)}"
    monkeypatch.setenv(TOKEN_VARIABLE, token)
    return token


@pytest.fixture
async def guarded_upstream(tmp_path: Path, upstream_token: str) -> AsyncIterator[Upstream]:
    """The test upstream, refusing (401) every request without the bearer token."""
    state = Upstream()
    guard = StaticTokens({upstream_token: "the-gateway"})
    async with running_server(upstream_server(state, str(tmp_path / "up.db"), guard)) as url:
        state.url = url
        yield state


@pytest.fixture
async def json_gateway(
    guarded_upstream: Upstream, tmp_path: Path
) -> AsyncIterator[tuple[Gateway, str]]:
    """A gateway from an ``mcpServers`` JSON file (as MCP hosts write them): the token
    in a header read from the environment, and an allow-list of two tools."""
    path = tmp_path / "servers.json"
    entry = {
        "url": guarded_upstream.url,
        "headers": {"Authorization": f"Bearer ${{env:{TOKEN_VARIABLE}}}"},
        "allowed_tools": ALLOWED,
    }
    path.write_text(json.dumps({"mcpServers": {"up": entry}}))
    async with gateway_at("", tmp_path, servers=load_servers(path)) as pair:
        yield pair


async def test_only_the_allowed_tools_are_listed_and_called(
    json_gateway: tuple[Gateway, str], http: httpx.AsyncClient, guarded_upstream: Upstream
) -> None:
    """A tool the servers file does not allow is not listed, and a call to it is refused
    without reaching the upstream; an allowed one is called with the file's credential."""
    _, url = json_gateway
    host = Host(http, url)
    listed = {t["name"] for t in (await host.rpc("tools/list"))["result"]["tools"]}
    assert {"slow", "quick", "longcall_status"} <= listed
    assert not {"plain", "big", "ask"} & listed
    refused = await host.rpc("tools/call", {"name": "plain", "arguments": {"key": "no"}})
    assert refused["error"]["code"] == -32602, refused
    assert "Unknown tool: 'plain'" in refused["error"]["message"]
    assert guarded_upstream.runs["no"] == 0
    quick = await host.call("quick", {"x": 3})
    assert quick["structuredContent"] == {"x": 3, "items": [3]}
    assert guarded_upstream.runs["quick-3"] == 1


async def test_the_upstream_credential_never_reaches_the_ledger_or_a_log(
    json_gateway: tuple[Gateway, str],
    http: httpx.AsyncClient,
    guarded_upstream: Upstream,
    upstream_token: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Calls that needed the token (the upstream refuses any without it) leave no trace of
    it in the gateway's ledger, its task store or any log line."""
    caplog.set_level(logging.DEBUG)
    _, url = json_gateway
    host = Host(http, url)
    early = await host.call("slow", {"key": "cred"})
    guarded_upstream.release("cred")
    done = await host.call("longcall_status", early["structuredContent"]["next"]["arguments"])
    while "handle" in done.get("structuredContent", {}):
        done = await host.follow(done)
    assert done["structuredContent"] == {"items": [0, 1, 2]}
    assert guarded_upstream.runs["cred"] == 1
    files = stored_files(tmp_path)
    assert "gateway.db" in files
    for name, content in files.items():
        assert upstream_token.encode() not in content, name
    assert caplog.records
    assert upstream_token not in caplog.text


def stored_files(directory: Path) -> dict[str, bytes]:
    """The gateway's ledger and task store files (with their WAL), by name."""
    prefixes = ("gateway.db", "gateway-tasks.db")
    return {
        p.name: p.read_bytes()
        for p in directory.iterdir()
        if p.name.startswith(prefixes) and p.is_file()
    }


async def test_status_waits_at_most_the_window_whatever_wait_s_asks(
    gateway: tuple[Gateway, str], http: httpx.AsyncClient, upstream: Upstream
) -> None:
    """longcall_status with wait_s far above the window answers once the window is over,
    still running: no status call outlives a host's timeout."""
    _, url = gateway
    host = Host(http, url)
    early = await host.call("slow", {"key": "capped"})
    handle = early["structuredContent"]["handle"]
    began = time.monotonic()
    status = await host.call("longcall_status", {"handle": handle, "wait_s": 3_600})
    took = time.monotonic() - began
    print(f"longcall_status(wait_s=3600) answered after {took:.2f} s (window {WINDOW_S} s)")
    assert WINDOW_S <= took < WINDOW_S + BOUND_S
    assert status["structuredContent"]["state"] == "running"
    assert status["structuredContent"]["next"]["arguments"]["wait_s"] <= WINDOW_S
    upstream.release("capped")


async def test_progress_reaches_a_host_that_sent_a_progress_token_over_http(
    gateway: tuple[Gateway, str], http: httpx.AsyncClient, upstream: Upstream
) -> None:
    """A tools/call with a progressToken is answered as an event stream: the upstream's
    progress arrives as notifications/progress with that token before the early return."""
    _, url = gateway
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "slow",
            "arguments": {"key": "progress"},
            "_meta": {"progressToken": "p-17"},
        },
    }
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": LEGACY}
    async with (
        asyncio.timeout(BOUND_S),
        http.stream("POST", url, json=body, headers=headers, timeout=BOUND_S) as answer,
    ):
        assert answer.headers["content-type"].startswith("text/event-stream")
        messages = [
            json.loads(line[len("data:") :])
            async for line in answer.aiter_lines()
            if line.startswith("data:")
        ]
    progress = [m["params"] for m in messages if m.get("method") == "notifications/progress"]
    assert progress, messages
    assert progress[0]["progressToken"] == "p-17"
    assert progress[0]["message"] == "step 1/4"
    assert progress[0]["progress"] == pytest.approx(25.0)
    (final,) = [m for m in messages if m.get("id") == 1]
    assert final["result"]["structuredContent"]["state"] == "running"
    assert "longcall_status" in text_of(final["result"])
    upstream.release("progress")
