"""Sessions of a stateful server (2025-11-25 Streamable HTTP) are the caller's, not one
process's: kept in the ledger, resumed by the next process, re-opened when the server
ends one, and ended (DELETE) when nothing of ours is open there.

Regression: the ``Mcp-Session-Id`` was not kept, so a new worker process initialized a
new session and could not reach the tasks the server had bound to the old one; sessions
were never closed.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from longcall.adapters.mcp.client import McpAdapter
from longcall.ledger import SQLiteLedger

pytestmark = pytest.mark.anyio
URL = "http://stateful.invalid/mcp"
CAPS = {"tasks": {"requests": {"tools": {"call": {}}}}}


class StatefulServer:
    """Answers like a stateful server: ``initialize`` issues a session, every later
    request must carry a live one (400 without, 404 for an ended one)."""

    def __init__(self) -> None:
        self.sessions = itertools.count(1)
        self.live: set[str] = set()
        self.seen: list[tuple[str, str | None]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        session = request.headers.get("mcp-session-id")
        if request.method == "DELETE":
            self.seen.append(("DELETE", session))
            self.live.discard(session or "")
            return httpx.Response(200)
        body = json.loads(request.content)
        method = body.get("method", "response")
        self.seen.append((method, session))
        if method == "initialize":
            issued = f"s{next(self.sessions)}"
            self.live.add(issued)
            result = {"protocolVersion": "2025-11-25", "capabilities": CAPS}
            return self._json(body, result, {"mcp-session-id": issued})
        if session is None:
            return httpx.Response(
                400,
                json={
                    "jsonrpc": "2.0",
                    "id": None,
                    "error": {"code": -32000, "message": "no session"},
                },
            )
        if session not in self.live:
            return httpx.Response(404, text="session not found")
        if "id" not in body:
            return httpx.Response(202)
        return self._json(body, {"tools": [{"name": "t", "inputSchema": {"type": "object"}}]})

    @staticmethod
    def _json(body: dict[str, Any], result: dict[str, Any], headers: Any = None) -> httpx.Response:
        message = {"jsonrpc": "2.0", "id": body["id"], "result": result}
        return httpx.Response(200, json=message, headers=headers)


async def connect(server: StatefulServer, ledger: SQLiteLedger) -> McpAdapter:
    from longcall.adapters.mcp.client import connect as mcp_connect

    http = httpx.AsyncClient(transport=httpx.MockTransport(server))
    return await mcp_connect(
        URL,
        http=http,
        session=ledger.server_session(URL),
        on_session=lambda s: ledger.put_server_session(URL, s),
    )


async def test_a_second_process_resumes_the_session(tmp_path: Path) -> None:
    """The session issued to one process is resumed by the next (no new initialize)."""
    server = StatefulServer()
    with SQLiteLedger(tmp_path / "l.db") as ledger:
        first = await connect(server, ledger)
        await first.bind("t")
        assert ledger.server_session(URL)["session_id"] == "s1"  # type: ignore[index]
        await first.aclose()
    with SQLiteLedger(tmp_path / "l.db") as ledger:
        second = await connect(server, ledger)
        await second.bind("t")
        await second.aclose()
    methods = [m for m, _ in server.seen]
    assert methods.count("initialize") == 1
    assert server.seen[-1] == ("tools/list", "s1")


async def test_an_ended_session_is_reopened_and_kept(tmp_path: Path) -> None:
    """A 404 for our session: a new one is opened (initialize without a session) and the
    refused request is sent again in it, once; the new session is kept."""
    server = StatefulServer()
    with SQLiteLedger(tmp_path / "l.db") as ledger:
        adapter = await connect(server, ledger)
        server.live.clear()  # the server restarted, or expired the session
        mark = len(server.seen)
        await adapter.bind("t")
        assert ledger.server_session(URL)["session_id"] == "s2"  # type: ignore[index]
        await adapter.aclose()
    assert server.seen[mark:] == [
        ("tools/list", "s1"),
        ("initialize", None),
        ("notifications/initialized", "s2"),
        ("tools/list", "s2"),
    ]


async def test_a_session_refused_again_is_not_retried_forever(tmp_path: Path) -> None:
    """A server that ends every new session at once: one re-open, one resend, then the
    refusal is the request's failure (no loop)."""
    server = StatefulServer()
    with SQLiteLedger(tmp_path / "l.db") as ledger:
        adapter = await connect(server, ledger)
        server.live.clear()
        original = server.__call__

        def forgetful(request: httpx.Request) -> httpx.Response:
            reply = original(request)
            if json.loads(request.content or b"{}").get("method") == "notifications/initialized":
                server.live.clear()
            return reply

        adapter.driver.http = httpx.AsyncClient(transport=httpx.MockTransport(forgetful))
        mark = len(server.seen)
        with pytest.raises(Exception, match="HTTP 404"):
            await adapter.bind("t")
        await adapter.aclose()
    assert [m for m, _ in server.seen[mark:]].count("initialize") == 1
    assert [m for m, _ in server.seen[mark:]].count("tools/list") == 2


async def test_the_executor_ends_a_session_nothing_uses(tmp_path: Path) -> None:
    """At close, a session at a server where the ledger holds nothing open is ended and
    forgotten (Streamable HTTP DELETE)."""
    from longcall.runtime.executor import Executor

    server = StatefulServer()
    with SQLiteLedger(tmp_path / "l.db") as ledger:
        http = httpx.AsyncClient(transport=httpx.MockTransport(server))

        async def factory(url: str, protocol: str) -> McpAdapter:
            from longcall.adapters.mcp.client import connect as mcp_connect

            return await mcp_connect(
                url,
                http=http,
                session=ledger.server_session(url),
                on_session=lambda s: ledger.put_server_session(url, s),
            )

        executor = Executor(ledger, adapter_factory=factory)
        await executor.bind(URL, "t")
        await executor.aclose()
        assert ("DELETE", "s1") in server.seen
        assert ledger.server_session(URL) is None
