"""The client and its driver never run a ledger statement on the event loop (D1).

A ledger statement can wait for a commit's fsync, or for the lock the driver's own
write holds on the ledger thread. On the loop, that wait holds every other request of
the process: a poll checked against its shared-budget send slot then leaves late, and
the polls of several workers bunch up at the server beyond the cap (seen at the
server's door with four workers on one ledger). So every statement the client's async
methods, its change observer, the input path and the adapters' session keeping run
goes to the ledger thread; only the documented synchronous reads (``result``,
``results``, ``history``, ``input_request``) read on the caller's thread.

The watch wraps the real backends' one statement entry (``_execute``) and notes each
statement run on the loop's thread, with the product frame that asked for it. The
test bodies themselves touch the ledger only through ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import threading
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.client.conftest import Peer
from tests.ledger.conftest import pg_schema

from longcall import CallOutcome, CallResult, Client, InputRequest, State
from longcall.core import events as e
from longcall.ledger import SQLiteLedger, open_ledger
from longcall.ledger.postgres import PostgresLedger
from longcall.runtime.step import apply_event

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

BOUND_S = LOADED_MACHINE_S


@pytest.fixture
def on_loop(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Statements run on this thread (the test's event loop), each as ``SQL ← caller``."""
    loop_thread = threading.get_ident()
    seen: list[str] = []
    for backend in (SQLiteLedger, PostgresLedger):

        def watched(
            self: Any, conn: Any, query: str, params: Any = None, _run: Any = backend._execute
        ) -> Any:
            if threading.get_ident() == loop_thread:
                seen.append(f"{' '.join(query.split()[:3])} ← {_asker()}")
            return _run(self, conn, query, params)

        monkeypatch.setattr(backend, "_execute", watched)
    return seen


def _asker() -> str:
    """The innermost frame outside the ledger package and this module."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if "/longcall/ledger/" not in frame.filename and frame.filename != __file__:
            return f"{Path(frame.filename).name}:{frame.lineno} {frame.name}"
    return "?"


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_url(request: pytest.FixtureRequest, peer: Peer) -> Iterator[str]:
    if request.param == "sqlite":
        yield peer.ledger
        return
    with pg_schema() as (dsn, schema):
        yield f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"


async def test_a_caller_never_waits_for_the_ledger_on_the_loop(
    peer: Peer, ledger_url: str, on_loop: list[str]
) -> None:
    """Calls, waits, input by callback and by person, cancel, an operator's
    reconciliation, change reports and a stateful server's session: no statement on
    the loop."""
    changes: list[tuple[str, State]] = []

    async def on_input(request: InputRequest) -> dict[str, Any]:
        return request.accept(approved=True)

    def on_change(result: CallResult, _previous: State | None) -> None:
        changes.append((result.call_node_id, result.state))

    with anyio.fail_after(BOUND_S):
        async with Client(ledger_url, on_input=on_input, on_change=on_change) as client:
            done = await client.call(peer.url, "sleep_report", {"seconds": 0.1, "rows": 1})
            asked = await client.call(
                peer.url, "approve", {"change": "a"}, node="by-callback", protocol="2025-11-25"
            )
            await client.call(
                peer.url, "sleep_report", {"seconds": 300, "rows": 1}, node="long", wait=False
            )
            await client.cancel("long")
            cancelled = await client.wait("long")
            await client.call(
                peer.url, "sleep_report", {"seconds": 300, "rows": 1}, node="stuck", wait=False
            )
        async with Client(ledger_url) as person:
            gate = await person.call(peer.url, "approve", {"change": "b"}, node="by-person")
            answered = await person.answer("by-person", fields={"approved": "true"})
            await asyncio.to_thread(_escalate, ledger_url, "stuck")
            settled = await person.reconcile(
                "stuck", "failed", note="the job was stopped by hand", actor="ops"
            )
        found = list(on_loop)

    assert found == []
    assert done.ok
    assert asked.result["structuredContent"]["approved"] is True
    assert cancelled.outcome is CallOutcome.CANCELLED
    assert gate.state is State.INPUT_REQUIRED
    assert answered.call_node_id == "by-person"
    assert settled.state is State.ACCEPTED
    assert ("long", State.CANCELLED_ACCEPTED) in changes


async def test_a_worker_never_waits_for_the_ledger_on_the_loop(
    peer: Peer, ledger_url: str, on_loop: list[str]
) -> None:
    """A worker (every open operation, change reports, input by callback) drives a batch
    to the end."""
    accepted: dict[str, list[str]] = {"caller": [], "worker": []}

    def reporter(who: str) -> Callable[[CallResult, State | None], None]:
        def on_change(result: CallResult, _previous: State | None) -> None:
            if result.state is State.ACCEPTED:
                accepted[who].append(result.call_node_id)

        return on_change

    async def on_input(request: InputRequest) -> dict[str, Any]:
        return request.accept(approved=True)

    with anyio.fail_after(BOUND_S):
        async with Client(ledger_url, on_change=reporter("caller")) as caller:
            for i in range(6):
                args = {"seconds": 0.5 + 0.1 * i, "rows": 1}
                await caller.call(peer.url, "sleep_report", args, node=f"job-{i}", wait=False)
            await caller.call(peer.url, "approve", {"change": "c"}, node="ask", wait=False)
        options: dict[str, Any] = {"on_change": reporter("worker"), "on_input": on_input}
        async with Client(ledger_url, drive_all=True, **options) as worker:
            await worker.drive(until_idle=True)
        found = list(on_loop)
    nodes = ["ask", *(f"job-{i}" for i in range(6))]
    states = await asyncio.to_thread(_states, ledger_url, nodes)

    assert found == []
    assert states == dict.fromkeys(nodes, State.ACCEPTED)
    # The caller drives its calls until it leaves: on a loaded machine a short job may
    # end before the handover, and a report its exit had no time to flush is dropped
    # (the flush is bounded). No call is reported accepted twice, and the approval
    # (nobody at the caller answers it) is accepted and reported by the worker.
    both = accepted["caller"] + accepted["worker"]
    assert len(both) == len(set(both))
    assert set(both) <= set(nodes)
    assert "ask" in accepted["worker"]


async def test_a_worker_until_idle_answers_the_last_input_round_first(
    peer: Peer, tmp_path: Path
) -> None:
    """``drive(until_idle=True)`` returns only once the input round it was handed is
    answered. Changes are handled by a task of their own (it reads the ledger beside
    the loop), so "idle" is judged only after that task has handled every change seen
    so far."""
    ledger_url = f"sqlite:///{tmp_path / 'ledger.db'}"

    async def on_input(request: InputRequest) -> dict[str, Any]:
        return request.accept(approved=True)

    with anyio.fail_after(BOUND_S):
        async with Client(ledger_url) as caller:
            await caller.call(peer.url, "approve", {"change": "d"}, node="ask", wait=False)
        async with Client(ledger_url, drive_all=True, on_input=on_input) as worker:
            await worker.drive(until_idle=True)
            done = await asyncio.to_thread(worker.result, "ask")
    assert done.state is State.ACCEPTED
    assert done.result["structuredContent"]["approved"] is True


def _states(ledger_url: str, nodes: list[str]) -> dict[str, State]:
    with open_ledger(ledger_url) as ledger:
        return {node: ledger.get(node).state for node in nodes}


def _escalate(ledger_url: str, node: str) -> None:
    """What the engine does when it cannot tell what happened: the node waits for an
    operator (written here as another process would)."""
    with open_ledger(ledger_url) as ledger:
        record = ledger.get(node)
        escalated = e.ReconciliationEscalated(reason="the server lost track of it")
        apply_event(ledger, record, escalated, now=record.updated_at, jitter=0.5)
