"""A poll that holds a send slot of its server's shared budget leaves only within it,
judged when its bytes are written (X3, D1).

The executor checks the slot before it calls the adapter, and the HTTP driver asks
again when the connection is ready and the request's headers are about to be written.
Between the two, the adapter does its own work and the event loop runs other tasks; a
loop held up there (a lazy import, a long step of another task) once let polls leave
long after their slot, and the polls of four workers bunched up at the server beyond
the cap. Here the clock jumps exactly there, and the server must see nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.client.conftest import Peer

from longcall import Client
from longcall.adapters.base import Adapter, Outcome
from longcall.core import OperationRecord
from longcall.core import commands as c
from longcall.ledger import SQLiteLedger
from longcall.runtime.engine import Action
from longcall.runtime.executor import Executor

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

BOUND_S = LOADED_MACHINE_S
SLOT_VALID_S = 0.15


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class HeldUp:
    """The real adapter, but the event loop is held up for ``lag_s`` between the
    executor's check of the slot and the adapter's work (as a long step elsewhere)."""

    def __init__(self, inner: Adapter, clock: Clock, lag_s: float) -> None:
        self.inner = inner
        self.clock = clock
        self.lag_s = lag_s

    async def poll(self, record: OperationRecord) -> Outcome:
        self.clock.now += self.lag_s
        return await self.inner.poll(record)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.parametrize(("lag_s", "leaves"), [(0.05, True), (1.0, False)])
async def test_a_poll_leaves_only_within_its_slot_when_written(
    peer: Peer, tmp_path: Path, lag_s: float, leaves: bool
) -> None:
    with anyio.fail_after(BOUND_S):
        async with Client(peer.ledger) as caller:
            args = {"seconds": 300, "rows": 1}
            await caller.call(peer.url, "sleep_report", args, node="n", wait=False)
        clock = Clock(1_000_000.0)
        executor = Executor(SQLiteLedger(tmp_path / "ledger.db"), clock=clock, single_process=True)
        try:
            record = await executor.aadopt("n")
            real = await executor._adapter(record.server, record.protocol)
            executor._adapters[(record.server, record.protocol)] = HeldUp(real, clock, lag_s)  # type: ignore[assignment]
            polls_before = peer.faults.counts.get("tasks/get", 0)
            action = Action(
                call_node_id="n",
                server=record.server,
                command=c.Poll(operation_id=record.operation_id or "", at=clock.now),
                record=record,
                not_after=clock.now + SLOT_VALID_S,
            )
            await executor._perform(action)
            # What came back is applied at the engine's next turn: taken here.
            await executor.on_ledger_thread(executor._apply_replies)
            missed = executor.engine.stats["slots_missed"]
        finally:
            await executor.aclose()
    polls = peer.faults.counts.get("tasks/get", 0) - polls_before
    assert (polls, missed) == ((1, 0) if leaves else (0, 1))
