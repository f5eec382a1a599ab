"""A server whose store was replaced cannot prove a submission "never created" (C5).

The create's response is lost, so the caller looks its submission key up. Meanwhile the
server's store was lost and the server restarted on a fresh one: its lookup answers
``found: false`` — from another store. That is not proof: the operation goes to an
operator, it is never submitted again (the work may well have run).
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from longcall.core import State
from longcall.ledger import SQLiteLedger
from longcall.runtime.engine import CallSpec
from longcall.runtime.executor import Executor
from longcall.server import build_reference_server

from .conftest import PHASE_TIMEOUT_S, Fault, FaultLayer, serve

pytestmark = pytest.mark.anyio


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_not_found_from_a_replaced_store_goes_to_an_operator(tmp_path: Path) -> None:
    """The lookup's ``storeId`` differs from the one at submission: reconciliation, not a
    resubmit; the new store never sees a create."""
    port = free_port()
    first = build_reference_server(store=f"sqlite:///{tmp_path / 'tasks-a.db'}")
    faults = FaultLayer(first.asgi_app())
    faults.faults.append(Fault(method="tools/call", nth=(1,), truncate_response=True))
    with SQLiteLedger(tmp_path / "ledger.db", synchronous="normal") as ledger:
        executor = Executor(ledger, single_process=True)
        try:
            async with serve(faults, port=port) as url:
                binding = await executor.bind(url, "sleep_report")
                assert binding.store_id is not None
                spec = CallSpec(
                    call_node_id="n",
                    binding=binding,
                    arguments={"seconds": 30, "rows": 1},
                )
                executor.call(spec)
                stop = asyncio.Event()
                runner = asyncio.create_task(executor.run(stop=stop))
                async with asyncio.timeout(PHASE_TIMEOUT_S):
                    await executor.wait_for("n", lambda r: r.state is not State.SUBMITTING)
                stop.set()
                await runner
            # The server comes back on the same address with another store.
            second = build_reference_server(store=f"sqlite:///{tmp_path / 'tasks-b.db'}")
            second_faults = FaultLayer(second.asgi_app())
            async with serve(second_faults, port=port):
                stop = asyncio.Event()
                runner = asyncio.create_task(executor.run(stop=stop))
                async with asyncio.timeout(PHASE_TIMEOUT_S):
                    record = await executor.wait_for(
                        "n", lambda r: r.state is State.RECONCILIATION_REQUIRED or r.is_terminal
                    )
                stop.set()
                await runner
        finally:
            await executor.aclose()
    assert record.state is State.RECONCILIATION_REQUIRED
    assert "store" in (record.reconciliation_reason or "")
    assert second_faults.counts.get("tools/call", 0) == 0  # never submitted again
