"""End-to-end fixtures: the reference server over real HTTP on 127.0.0.1, optionally behind
a fault-injecting ASGI layer, and an executor with a real SQLite ledger."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from tests.bounds import LOADED_MACHINE_S

from longcall.core import OperationRecord
from longcall.ledger import SQLiteLedger
from longcall.runtime.engine import CallSpec
from longcall.runtime.executor import Executor
from longcall.server import build_reference_server

PHASE_TIMEOUT_S = LOADED_MACHINE_S

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass
class Fault:
    """What to do to the n-th request of one JSON-RPC method (1-based, counted per method)."""

    method: str
    nth: tuple[int, ...]
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    truncate_response: bool = False
    replace_authorization: str | None = None


class FaultLayer:
    """An ASGI layer in front of the server: real HTTP, faults at the server's edge."""

    def __init__(self, inner: App) -> None:
        self.inner = inner
        self.faults: list[Fault] = []
        self.counts: dict[str, int] = {}
        self.seen: list[tuple[str, float]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.inner(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        method = _method(body)
        self.counts[method] = self.counts.get(method, 0) + 1
        self.seen.append((method, asyncio.get_running_loop().time()))
        fault = next(
            (f for f in self.faults if f.method == method and self.counts[method] in f.nth), None
        )
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:
                # As a real server does: the next message is the client's disconnect, when
                # it comes (a streaming response waits on it).
                return dict(await receive())
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        if fault is not None and fault.status is not None:
            await _respond(send, fault.status, fault.headers, b'{"error":"injected"}')
            return
        if fault is not None and fault.replace_authorization is not None:
            headers = [(k, v) for k, v in scope["headers"] if k != b"authorization"]
            headers.append((b"authorization", fault.replace_authorization.encode()))
            scope = {**scope, "headers": headers}
        if fault is not None and fault.truncate_response:
            await self.inner(scope, replay, _truncating(send))
            return
        await self.inner(scope, replay, send)


def _method(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return "?"
    return str(data.get("method", "?")) if isinstance(data, dict) else "?"


async def _respond(send: Send, status: int, headers: dict[str, str], body: bytes) -> None:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    raw.append((b"content-type", b"application/json"))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def _truncating(send: Send) -> Send:
    """Cut every response body in half (and drop Content-Length so it is not a framing error)."""

    async def truncated(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message["headers"] if k != b"content-length"]
            message = {**message, "headers": headers}
        elif message["type"] == "http.response.body":
            body = message.get("body", b"")
            message = {**message, "body": body[: max(1, len(body) // 2)]}
        await send(message)

    return truncated


@contextlib.asynccontextmanager
async def serve(app: App, port: int = 0) -> AsyncIterator[str]:
    """Serve an ASGI app on 127.0.0.1 (a free port unless given); yields the MCP URL."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()


@dataclass
class World:
    """A reference server (behind a fault layer) and an executor on a file ledger."""

    url: str
    faults: FaultLayer
    ledger: SQLiteLedger
    executor: Executor
    task_store: Path

    async def call(
        self, node: str, tool: str, arguments: dict[str, Any], *, protocol: str | None = None
    ) -> OperationRecord:
        binding = await self.executor.bind(self.url, tool, protocol=protocol)
        return self.executor.call(CallSpec(call_node_id=node, binding=binding, arguments=arguments))

    async def settle(self, *nodes: str) -> list[OperationRecord]:
        """Run the executor until every node is terminal or in reconciliation."""
        stop = asyncio.Event()
        runner = asyncio.create_task(self.executor.run(stop=stop))
        try:
            async with asyncio.timeout(PHASE_TIMEOUT_S):
                for node in nodes:
                    await self.executor.wait_for(node, _settled)
        finally:
            stop.set()
            await runner
        return [self.ledger.get(node) for node in nodes]


async def call_to_terminal(
    executor: Executor, url: str, node: str, tool: str, arguments: dict[str, Any]
) -> OperationRecord:
    """Bind, call and drive one node until it is accepted or escalated."""
    binding = await executor.bind(url, tool)
    executor.call(CallSpec(call_node_id=node, binding=binding, arguments=arguments))
    stop = asyncio.Event()
    runner = asyncio.create_task(executor.run(stop=stop))
    try:
        async with asyncio.timeout(PHASE_TIMEOUT_S):
            return await executor.wait_terminal(node)
    finally:
        stop.set()
        await runner


def _settled(record: OperationRecord) -> bool:
    from longcall.core import State

    return record.is_terminal or record.state is State.RECONCILIATION_REQUIRED


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    """A fresh reference server, fault layer, ledger and executor."""
    store = tmp_path / "tasks.db"
    server = build_reference_server(store=f"sqlite:///{store}")
    faults = FaultLayer(server.asgi_app())
    async with serve(faults) as url:
        with SQLiteLedger(tmp_path / "ledger.db", synchronous="normal") as ledger:
            executor = Executor(ledger, refresh_interval_s=0.2)
            try:
                yield World(
                    url=url, faults=faults, ledger=ledger, executor=executor, task_store=store
                )
            finally:
                await executor.aclose()
