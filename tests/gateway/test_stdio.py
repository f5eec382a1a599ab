"""The gateway's stdio transport: a line too long is answered and skipped, not fatal."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from tests.bounds import LOADED_MACHINE_S

from longcall.gateway.stdio import StdioSession
from longcall.server import LongcallServer

pytestmark = pytest.mark.anyio

BOUND_S = LOADED_MACHINE_S


class _Collecting:
    """A writer keeping every line written."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.three = asyncio.Event()

    def write(self, data: bytes) -> None:
        self.lines += [json.loads(line) for line in data.splitlines()]
        if len(self.lines) >= 3:
            self.three.set()

    async def drain(self) -> None:
        return None


async def test_an_oversized_line_is_refused_and_the_next_line_still_answered(
    tmp_path: Path,
) -> None:
    """A line past the limit gets -32600 with id null; the ping after it is answered."""
    server = LongcallServer(store=f"sqlite:///{tmp_path / 'tasks.db'}")
    reader = asyncio.StreamReader(limit=1024)
    ping = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "ping"}).encode() + b"\n"
    reader.feed_data(b'{"jsonrpc":"2.0","id":1,"method":"' + b"x" * 5000 + b'"}\n')
    reader.feed_data(ping)
    reader.feed_data(b"y" * 3000 + b"\n")
    writer = _Collecting()
    session = asyncio.ensure_future(StdioSession(server, reader, writer).run())
    await asyncio.wait_for(writer.three.wait(), BOUND_S)  # answers are in before the end
    reader.feed_eof()
    await asyncio.wait_for(session, BOUND_S)
    errors = [line for line in writer.lines if "error" in line]
    assert [(e["id"], e["error"]["code"]) for e in errors] == [(None, -32600), (None, -32600)]
    assert any(line.get("id") == 7 and "result" in line for line in writer.lines)
