"""Every wait on the executor ends: an error escaping its loop fails the waits, a node
waiting for an operator returns at once, and a zero poll rate is refused up front."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import anyio
import pytest
from tests.runtime.test_engine import binding

from longcall.adapters.base import Adapter
from longcall.core import State
from longcall.core import events as e
from longcall.ledger import SQLiteLedger
from longcall.runtime.engine import CallSpec
from longcall.runtime.executor import Executor, ExecutorFailed
from longcall.runtime.step import apply_event

pytestmark = pytest.mark.anyio
BOUND_S = 10.0


async def _no_adapter(server: str, protocol: str) -> Adapter:
    raise AssertionError("no request is sent in these tests")


def test_a_zero_poll_rate_is_refused_up_front(tmp_path: Path) -> None:
    """``poll_qps_max=0`` used to kill the loop at the first poll, leaving waits hanging."""
    with SQLiteLedger(tmp_path / "l.db") as ledger, pytest.raises(ValueError, match="above 0"):
        Executor(ledger, poll_qps_max=0)


async def test_an_error_escaping_the_loop_fails_every_wait(tmp_path: Path) -> None:
    """The ledger failing under the loop ends run() and every wait with ExecutorFailed."""
    ledger = SQLiteLedger(tmp_path / "l.db")
    # Alone on its ledger, the executor re-reads it at every refresh: the first one
    # after the close fails.
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
    with anyio.fail_after(BOUND_S):
        terminal = asyncio.ensure_future(executor.wait_terminal("n"))
        matching = asyncio.ensure_future(executor.wait_for("n", lambda r: r.is_terminal))
        change = asyncio.ensure_future(executor.wait_change())
        # Closed after the three waits registered (they run before this callback).
        asyncio.get_running_loop().call_soon(ledger.close)
        with pytest.raises(ExecutorFailed, match="closed database"):
            await executor.run()
        for waiter in (terminal, matching, change):
            with pytest.raises(ExecutorFailed):
                await waiter
        with pytest.raises(ExecutorFailed):
            await executor.wait_change()


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
