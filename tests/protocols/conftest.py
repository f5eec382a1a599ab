"""Fixtures for the AIP-151 and Apify-style protocol tests: real servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from longcall.server import LongcallServer, running_server
from longcall.server.app import listening_socket
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
