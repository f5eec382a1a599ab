"""A plain ``def`` tool is served like an ``async def`` one, run off the event loop so
that a blocking tool never stalls the server (S1)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import anyio
import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.e2e.conftest import serve

from longcall import CallOutcome, Client
from longcall.server import LongcallServer, TaskContext

pytestmark = pytest.mark.anyio

BOUND_S = LOADED_MACHINE_S


async def test_a_plain_def_tool_runs_on_a_worker_thread(tmp_path: Path) -> None:
    """Registered without TypeError, called through the client, run on another thread."""
    server = LongcallServer(store=f"sqlite:///{tmp_path / 'tasks.db'}")
    loop_thread = threading.get_ident()

    @server.tool(task="optional", poll_interval_ms=100)
    def add(a: int, b: int) -> dict[str, int]:
        """Add two numbers, blocking a little as real work does."""
        time.sleep(0.05)
        return {"sum": a + b, "same_thread": int(threading.get_ident() == loop_thread)}

    with anyio.fail_after(BOUND_S):
        async with (
            serve(server.asgi_app()) as url,
            Client(f"sqlite:///{tmp_path / 'l.db'}") as client,
        ):
            result = await client.call(url, "add", {"a": 2, "b": 3})
    assert result.outcome is CallOutcome.OK, result.reason
    assert result.result["structuredContent"] == {"sum": 5, "same_thread": 0}


def test_a_plain_def_tool_that_takes_a_context_is_refused(tmp_path: Path) -> None:
    """TaskContext methods are awaited: a plain def taking one is a clear TypeError."""
    server = LongcallServer(store=f"sqlite:///{tmp_path / 'tasks.db'}")
    with pytest.raises(TypeError, match="make it an async function"):

        @server.tool()
        def report(ctx: TaskContext, n: int) -> int:
            return n
