"""Push notifications wake the poller early but never replace it (X3, S7, P1, P2)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.e2e.conftest import App, Fault, FaultLayer, Receive, Scope, Send, serve

from longcall.core import State
from longcall.ledger import SQLiteLedger
from longcall.runtime.engine import CallSpec
from longcall.runtime.executor import Executor
from longcall.server import LongcallServer, TaskContext

pytestmark = pytest.mark.anyio

POLL_INTERVAL_MS = 5000
"""The interval of ``brief_job``: the calls that go without push wait it out."""
PUSHED_POLL_INTERVAL_MS = 600_000
"""The interval of ``pushed_job``: so long that an acceptance within the test's bound can
only come from a push, however slowly a busy machine runs the call."""
WORK_S = 0.3
WAIT_LIMIT_S = LOADED_MACHINE_S


class GetRefusal:
    """Refuses the standalone GET stream (2025-11-25 push) with 503 when told; passes the rest."""

    def __init__(self, inner: App) -> None:
        self.inner = inner
        self.refusing = False
        self.refused = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.refusing and scope["type"] == "http" and scope["method"] == "GET":
            self.refused += 1
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await self.inner(scope, receive, send)


@dataclass
class PushWorld:
    """A server with one slow-polled tool, its fault layers, and an executor."""

    url: str
    faults: FaultLayer
    gets: GetRefusal
    executor: Executor
    ledger: SQLiteLedger


@pytest.fixture
async def push_world(tmp_path: Path) -> AsyncIterator[PushWorld]:
    """A LongcallServer whose tools suggest 5 s and 10 min poll intervals, behind fault layers."""
    server = LongcallServer(store=f"sqlite:///{tmp_path / 'tasks.db'}")

    @server.tool(task="optional", poll_interval_ms=POLL_INTERVAL_MS)
    async def brief_job(ctx: TaskContext, seconds: float) -> dict[str, Any]:
        """Work ``seconds``, then report done."""
        await asyncio.sleep(seconds)  # the tool's own work, not a test waiting
        return {"done": True}

    @server.tool(task="optional", poll_interval_ms=PUSHED_POLL_INTERVAL_MS)
    async def pushed_job(ctx: TaskContext, seconds: float) -> dict[str, Any]:
        """Work ``seconds``, then report done (polled once every ten minutes)."""
        await asyncio.sleep(seconds)  # the tool's own work, not a test waiting
        return {"done": True}

    faults = FaultLayer(server.asgi_app())
    gets = GetRefusal(faults)
    async with serve(gets) as url:
        with SQLiteLedger(tmp_path / "ledger.db", synchronous="normal") as ledger:
            executor = Executor(ledger, refresh_interval_s=0.2)
            try:
                yield PushWorld(url=url, faults=faults, gets=gets, executor=executor, ledger=ledger)
            finally:
                await executor.aclose()


async def accept_time_s(world: PushWorld, version: str, tool: str = "brief_job") -> float:
    """Run one call of ``tool`` through the executor; seconds from call to acceptance."""
    binding = await world.executor.bind(world.url, tool, protocol=version)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    runner = asyncio.create_task(world.executor.run(stop=stop))
    try:
        started = loop.time()
        world.executor.call(
            CallSpec(call_node_id="n", binding=binding, arguments={"seconds": WORK_S})
        )
        async with asyncio.timeout(WAIT_LIMIT_S):
            record = await world.executor.wait_terminal("n")
        elapsed = loop.time() - started
    finally:
        stop.set()
        await runner
    assert record.state is State.ACCEPTED
    assert len(world.ledger.receipts()) == 1
    return elapsed


def polls(world: PushWorld) -> int:
    return world.faults.counts.get("tasks/get", 0)


@pytest.mark.parametrize("version", ["2026-07-28", "2025-11-25"])
async def test_push_wakes_the_poller_before_the_server_interval(
    push_world: PushWorld, version: str
) -> None:
    """A pushed completion is accepted long before the server's poll interval (X3)."""
    elapsed = await accept_time_s(push_world, version, "pushed_job")
    assert elapsed < min(WAIT_LIMIT_S, PUSHED_POLL_INTERVAL_MS / 1000 / 2), elapsed
    # The notification only woke the poller: the terminal still came from one poll.
    assert polls(push_world) == 1
    events = [h.event for h in push_world.ledger.history("n")]
    assert "TerminalObserved" in events
    if version == "2026-07-28":
        assert push_world.faults.counts.get("subscriptions/listen", 0) >= 1


async def test_refused_listen_completes_by_polling_alone_2026(push_world: PushWorld) -> None:
    """With subscriptions/listen refused (503), the call completes at the polled pace (X3)."""
    push_world.faults.faults.append(
        Fault(method="subscriptions/listen", nth=tuple(range(1, 1000)), status=503)
    )
    elapsed = await accept_time_s(push_world, "2026-07-28")
    assert elapsed >= POLL_INTERVAL_MS / 1000 - 0.05, elapsed
    assert push_world.faults.counts["subscriptions/listen"] >= 1


async def test_refused_get_stream_completes_by_polling_alone_2025(push_world: PushWorld) -> None:
    """With the GET stream refused (503), the call completes at the polled pace (X3)."""
    push_world.gets.refusing = True
    elapsed = await accept_time_s(push_world, "2025-11-25")
    assert elapsed >= POLL_INTERVAL_MS / 1000 - 0.05, elapsed
    assert push_world.gets.refused >= 1
