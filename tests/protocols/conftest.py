"""Fixtures for the AIP-151 and Apify-style protocol tests: real servers on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

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
