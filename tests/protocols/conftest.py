"""Fixtures for the AIP-151 and Apify-style protocol tests: real servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import uvicorn

from longcall.core import State
from longcall.ledger import open_ledger
from longcall.runtime.engine import CallSpec
from longcall.runtime.executor import AdapterFactory, Executor, default_adapter_factory
from longcall.runtime.listen import listening_socket
from longcall.server import LongcallServer, running_server
from longcall.server.examples import build_reference_server


@pytest.fixture
async def reference_base(tmp_path: Path) -> AsyncIterator[str]:
    """The reference server (MCP, AIP-151 facade) on a free port; yields ``http://HOST:PORT``."""
    server = build_reference_server(store=str(tmp_path / "tasks.db"))
    async with running_server(server) as url:
        yield url.removesuffix("/mcp")


async def serve(server: LongcallServer) -> AsyncIterator[str]:
    """Serve ``server`` and yield its base URL (helper for tests building their own server)."""
    async with running_server(server) as url:
        yield url.removesuffix("/mcp")


@contextlib.asynccontextmanager
async def serve_app(app: Any) -> AsyncIterator[str]:
    """Serve any ASGI app on a free 127.0.0.1 port (a crafted, misbehaving peer)."""
    sock = listening_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    serving = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        sock.close()


async def run_call(
    tmp_path: Path,
    url: str,
    tool: str,
    arguments: dict[str, Any],
    *,
    cancel: bool = False,
    adapter_factory: AdapterFactory = default_adapter_factory,
    timeout_s: float = 30.0,
) -> tuple[Any, bytes | None]:
    """One call node through the real executor and a file ledger, optionally cancelled
    once it is WORKING; returns its final record and accepted payload."""
    with open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        executor = Executor(ledger, adapter_factory=adapter_factory)
        stop = asyncio.Event()
        try:
            binding = await executor.bind(url, tool)
            executor.call(CallSpec(call_node_id="node-1", binding=binding, arguments=arguments))
            runner = asyncio.create_task(executor.run(stop=stop))
            try:
                with anyio.fail_after(timeout_s):
                    if cancel:
                        await executor.wait_for("node-1", lambda r: r.state is State.WORKING)
                        executor.cancel("node-1")
                    record = await executor.wait_terminal("node-1")
            finally:
                stop.set()
                await runner
        finally:
            await executor.aclose()
        return record, ledger.result_payload("node-1")
