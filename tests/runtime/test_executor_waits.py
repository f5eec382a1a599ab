"""Every wait on the executor ends: an error escaping its loop fails the waits, a node
waiting for an operator returns at once, and a zero poll rate is refused up front."""

from __future__ import annotations

import asyncio
import random
import sqlite3
from pathlib import Path

import anyio
import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.runtime.test_engine import binding

from longcall.adapters.base import Adapter
from longcall.core import State
from longcall.core import events as e
from longcall.ledger import SQLiteLedger
from longcall.runtime.engine import CallSpec
from longcall.runtime.executor import Executor, ExecutorFailed
from longcall.runtime.step import apply_event

pytestmark = pytest.mark.anyio
BOUND_S = LOADED_MACHINE_S


async def _no_adapter(server: str, protocol: str) -> Adapter:
    raise AssertionError("no request is sent in these tests")


def test_a_zero_poll_rate_is_refused_up_front(tmp_path: Path) -> None:
    """``poll_qps_max=0`` used to kill the loop at the first poll, leaving waits hanging."""
    with SQLiteLedger(tmp_path / "l.db") as ledger, pytest.raises(ValueError, match="above 0"):
        Executor(ledger, poll_qps_max=0)


class FailingReads(SQLiteLedger):
    """A real SQLite ledger whose refresh read fails when told to (a fault under the
    loop: the database went away)."""

    failing = False

    def open_versions(self) -> dict[str, int]:
        if self.failing:
            raise sqlite3.OperationalError("disk I/O error")
        return super().open_versions()


async def test_an_error_escaping_the_loop_fails_every_wait(tmp_path: Path) -> None:
    """The ledger failing under the loop ends run() and every wait with ExecutorFailed,
    whether the wait began before the failure or after it."""
    ledger = FailingReads(tmp_path / "l.db")
    # Alone on its ledger, the executor re-reads it at every refresh: the first one fails.
    executor = Executor(
        ledger,
        adapter_factory=_no_adapter,
        refresh_interval_s=0.0,
        rng=random.Random(1),
        single_process=True,
    )
    executor.engine.start_call(
        CallSpec(call_node_id="n", binding=binding(), arguments={}), now=1e12
    )  # planned far in the future: the loop only refreshes
    try:
        with anyio.fail_after(BOUND_S):
            terminal = asyncio.ensure_future(executor.wait_terminal("n"))
            matching = asyncio.ensure_future(executor.wait_for("n", lambda r: r.is_terminal))
            change = asyncio.ensure_future(executor.wait_change())
            ledger.failing = True
            with pytest.raises(ExecutorFailed, match="disk I/O error"):
                await executor.run()
            for waiter in (terminal, matching, change):
                with pytest.raises(ExecutorFailed):
                    await waiter
            with pytest.raises(ExecutorFailed):
                await executor.wait_terminal("n")
            with pytest.raises(ExecutorFailed):
                await executor.wait_change()
    finally:
        await executor.aclose()
        ledger.close()


async def test_waiting_on_a_node_in_reconciliation_returns_at_once(tmp_path: Path) -> None:
    """wait_terminal on a node already waiting for an operator returns it (no hang)."""
    with SQLiteLedger(tmp_path / "l.db") as ledger:
        executor = Executor(ledger, adapter_factory=_no_adapter)
        record = executor.engine.start_call(
            CallSpec(call_node_id="n", binding=binding(), arguments={}), now=0.0
        )
        apply_event(ledger, record, e.ReconciliationEscalated(reason="x"), now=1.0, jitter=0.5)
        fresh = Executor(ledger, adapter_factory=_no_adapter)
        with anyio.fail_after(BOUND_S):
            settled = await fresh.wait_terminal("n")
        assert settled.state is State.RECONCILIATION_REQUIRED


async def test_a_change_before_the_scheduled_wait_first_runs_still_wakes_it(
    tmp_path: Path,
) -> None:
    """A caller that checks a condition, then schedules the wait (``Client.drive``
    with ``until_idle``), is woken by a change the loop makes before the wait first
    runs: once lost, a worker with ``--until-idle`` waited for ever after its last
    operation was accepted."""
    with SQLiteLedger(tmp_path / "l.db") as ledger:
        executor = Executor(ledger, adapter_factory=_no_adapter)
        try:
            change = asyncio.ensure_future(executor.wait_change())
            executor._signal_change(None)  # what the loop does when a step settles
            with anyio.fail_after(BOUND_S):
                await change
        finally:
            await executor.aclose()
