"""Faults the runtime must survive, injected at the server's HTTP edge (X3, X6, X7, X9)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.e2e.conftest import PHASE_TIMEOUT_S, Fault, FaultLayer, World, serve

from longcall.core import ResultKind, State
from longcall.core.retry import BreakerState, CircuitBreaker
from longcall.ledger import SQLiteLedger
from longcall.runtime.executor import Executor
from longcall.server import build_reference_server

pytestmark = pytest.mark.anyio


async def test_429_with_retry_after_pushes_the_next_poll_out(world: World) -> None:
    """A 429 with Retry-After on a poll delays the next poll at least that long (X3, X9)."""
    world.faults.faults.append(
        Fault(method="tasks/get", nth=(1,), status=429, headers={"Retry-After": "2"})
    )
    await world.call("n", "sleep_report", {"seconds": 0.2, "rows": 1}, protocol="2026-07-28")
    (record,) = await world.settle("n")
    assert record.state is State.ACCEPTED
    polls = [t for method, t in world.faults.seen if method == "tasks/get"]
    assert polls[1] - polls[0] >= 2.0 - 0.05
    assert "RequestFailed" in [h.event for h in world.ledger.history("n")]


async def test_503_without_retry_after_is_retried(world: World) -> None:
    """503s on polls are retried with backoff and the call still completes once (X9)."""
    world.faults.faults.append(Fault(method="tasks/get", nth=(1, 2), status=503))
    await world.call("n", "sleep_report", {"seconds": 0.2, "rows": 1}, protocol="2026-07-28")
    (record,) = await world.settle("n")
    assert record.state is State.ACCEPTED
    events = [h.event for h in world.ledger.history("n")]
    assert events.count("RequestFailed") == 2
    assert len(world.ledger.receipts()) == 1


@pytest.mark.parametrize(
    ("version", "method"), [("2026-07-28", "tasks/get"), ("2025-11-25", "tasks/result")]
)
async def test_truncated_result_is_refetched_never_accepted(
    world: World, version: str, method: str
) -> None:
    """A truncated result is never accepted; the fetch is retried and the whole result kept (X6)."""
    await world.call("n", "crawl", {"pages": 2, "items_per_page": 3}, protocol=version)
    world.faults.faults.append(
        Fault(method=method, nth=tuple(range(1, 40)), truncate_response=True)
    )
    stop = asyncio.Event()
    runner = asyncio.create_task(world.executor.run(stop=stop))
    try:
        async with asyncio.timeout(LOADED_MACHINE_S):
            await world.executor.wait_for(
                "n",
                lambda r: (
                    r.state in (State.FETCHING_RESULT, State.RECONCILIATION_REQUIRED)
                    or r.last_error is not None
                ),
            )
    finally:
        stop.set()
        await runner
    assert world.ledger.receipt("n") is None
    world.faults.faults.clear()
    (record,) = await world.settle("n")
    assert record.state is State.ACCEPTED, record.reconciliation_reason
    assert record.result_kind is ResultKind.VALUE
    payload = json.loads(world.ledger.result_payload("n") or b"{}")
    assert len(payload["structuredContent"]["items"]) == 6


async def test_malformed_poll_reply_is_retried(world: World) -> None:
    """A 200 reply that is not JSON-RPC is a retryable malformed response (X9)."""
    world.faults.faults.append(Fault(method="tasks/get", nth=(1,), status=200))
    await world.call("n", "sleep_report", {"seconds": 0.2, "rows": 1}, protocol="2026-07-28")
    (record,) = await world.settle("n")
    assert record.state is State.ACCEPTED
    assert "RequestFailed" in [h.event for h in world.ledger.history("n")]


async def test_task_that_now_belongs_to_someone_else_goes_to_reconciliation(world: World) -> None:
    """A task answered as unknown (another principal) is UNKNOWN, findable, not accepted (X7)."""
    world.faults.faults.append(
        Fault(method="tasks/get", nth=tuple(range(1, 100)), replace_authorization="Bearer intruder")
    )
    await world.call("n", "sleep_report", {"seconds": 5, "rows": 1}, protocol="2026-07-28")
    (record,) = await world.settle("n")
    assert record.state is State.RECONCILIATION_REQUIRED
    assert record.reconciliation_reason
    assert world.ledger.receipt("n") is None
    assert world.ledger.find_by_operation_id(record.operation_id or "") == [record]
    assert world.ledger.find_by_submission_key(record.submission_key) == record


async def test_server_restart_mid_task(tmp_path: Path) -> None:
    """The server restarts on its store while the task runs; the call completes once (S2, L7)."""
    store = f"sqlite:///{tmp_path / 'tasks.db'}"
    first = FaultLayer(build_reference_server(store=store).asgi_app())
    with SQLiteLedger(tmp_path / "ledger.db", synchronous="normal") as ledger:
        executor = Executor(ledger, refresh_interval_s=0.2)
        try:
            async with serve(first) as url:
                port = int(url.split(":")[2].split("/")[0])
                world = World(
                    url=url, faults=first, ledger=ledger, executor=executor, task_store=tmp_path
                )
                await world.call("n", "sleep_report", {"seconds": 3, "rows": 2})
                stop = asyncio.Event()
                runner = asyncio.create_task(executor.run(stop=stop))
                async with asyncio.timeout(LOADED_MACHINE_S):
                    await executor.wait_for("n", lambda r: r.state is State.WORKING)
                stop.set()
                await runner
            second = FaultLayer(build_reference_server(store=store).asgi_app())
            async with serve(second, port=port):
                (record,) = await world.settle("n")
        finally:
            await executor.aclose()
        assert record.state is State.ACCEPTED, record.reconciliation_reason
        assert len(ledger.receipts()) == 1
        assert first.counts.get("tools/call") == 1
        assert "tools/call" not in second.counts


async def test_a_workers_breaker_is_kept_in_the_ledger_as_it_opens_and_closes(
    tmp_path: Path,
) -> None:
    """503s on every poll open the worker's breaker for the server: the ledger keeps it
    open, with its until-time and the failure; once the server answers again the trial
    closes it and the ledger says so (X9, O2)."""
    faults = FaultLayer(build_reference_server(store=f"sqlite:///{tmp_path / 't.db'}").asgi_app())
    faults.faults.append(Fault(method="tasks/get", nth=tuple(range(1, 10_000)), status=503))
    async with serve(faults) as url:
        with SQLiteLedger(tmp_path / "ledger.db", synchronous="normal") as ledger:
            executor = Executor(
                ledger, refresh_interval_s=0.2, breaker=CircuitBreaker(failures_max=2, reset_s=1.0)
            )
            world = World(
                url=url, faults=faults, ledger=ledger, executor=executor, task_store=tmp_path
            )
            try:
                await world.call("n", "sleep_report", {"seconds": 0.2, "rows": 1})
                stop = asyncio.Event()
                runner = asyncio.create_task(executor.run(stop=stop))
                try:
                    async with asyncio.timeout(PHASE_TIMEOUT_S):
                        await executor.wait_for("n", lambda r: r.failed_attempts >= 2)
                    # Queued behind the reply that opened it, on the same ledger thread.
                    (opened,) = await executor.on_ledger_thread(ledger.breakers)
                    faults.faults.clear()
                    async with asyncio.timeout(PHASE_TIMEOUT_S):
                        await executor.wait_terminal("n")
                    (closed,) = await executor.on_ledger_thread(ledger.breakers)
                finally:
                    stop.set()
                    await runner
            finally:
                await executor.aclose()
    assert (opened.server, opened.owner, opened.state) == (url, executor.owner, BreakerState.OPEN)
    assert opened.open_until is not None
    assert opened.failures >= 2
    assert "poll: unavailable" in opened.last_error
    assert (closed.state, closed.open_until, closed.failures) == (BreakerState.CLOSED, None, 0)
