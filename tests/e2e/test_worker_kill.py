"""L7 end to end: a worker SIGKILLed at random points during a batch of 50 operations.

The reference server runs in this process over real HTTP; the worker is a real
``longcall worker`` process on a file ledger. It is killed three times at seeded
random moments (after a random number of ledger commits), then run until idle.
At the end every operation has exactly one receipt, and the server holds exactly
one task per call node.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import sqlite3
import sys
from pathlib import Path

import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.e2e.conftest import FaultLayer, serve

from longcall.core import State
from longcall.ledger import SQLiteLedger
from longcall.runtime.engine import CallSpec
from longcall.runtime.executor import Executor
from longcall.server import build_reference_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

OPERATIONS = 50
KILLS = 3
ROUND_TIMEOUT_S = LOADED_MACHINE_S
FINAL_TIMEOUT_S = 180.0
LEASE_S = 2.0


def _commits(ledger_path: Path) -> int:
    with contextlib.closing(sqlite3.connect(ledger_path)) as db:
        return int(db.execute("SELECT count(*) FROM history").fetchone()[0])


async def _worker(ledger_path: Path, *, until_idle: bool) -> asyncio.subprocess.Process:
    # A short lease: a killed worker's operations are taken over after 2 s, not 30 s.
    args = [
        *(sys.executable, "-m", "longcall", "worker", "--ledger", f"sqlite:///{ledger_path}"),
        *("--lease", str(LEASE_S)),
    ]
    if until_idle:
        args.append("--until-idle")
    return await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )


async def _wait_for_commits(
    ledger_path: Path, target: int, worker: asyncio.subprocess.Process
) -> None:
    """Bounded polling of a real condition in another process (the worker's commits)."""
    async with asyncio.timeout(ROUND_TIMEOUT_S):
        # Another process writes the ledger: nothing to await but the file itself.
        while _commits(ledger_path) < target and worker.returncode is None:  # noqa: ASYNC110
            await asyncio.sleep(0.02)


async def test_worker_killed_at_random_points(tmp_path: Path) -> None:
    """Three SIGKILLs mid-batch: one receipt per operation, one server task per call node (L7)."""
    rng = random.Random(20261129)
    store_path = tmp_path / "tasks.db"
    ledger_path = tmp_path / "ledger.db"
    server = build_reference_server(store=f"sqlite:///{store_path}")
    async with serve(FaultLayer(server.asgi_app())) as url:
        with SQLiteLedger(ledger_path) as ledger:
            executor = Executor(ledger)
            binding = await executor.bind(url, "sleep_report")
            for i in range(OPERATIONS):
                arguments = {"seconds": rng.choice([0.5, 1.0, 2.0]), "rows": i % 3}
                executor.call(
                    CallSpec(call_node_id=f"op-{i}", binding=binding, arguments=arguments)
                )
            await executor.aclose()
        for _ in range(KILLS):
            worker = await _worker(ledger_path, until_idle=False)
            target = _commits(ledger_path) + rng.randint(10, 90)
            try:
                await _wait_for_commits(ledger_path, target, worker)
            finally:
                if worker.returncode is None:
                    worker.send_signal(signal.SIGKILL)
                await worker.wait()
        final = await _worker(ledger_path, until_idle=True)
        async with asyncio.timeout(FINAL_TIMEOUT_S):
            assert await final.wait() == 0

    with SQLiteLedger(ledger_path) as ledger:
        records = ledger.list_by_state()
        assert len(records) == OPERATIONS
        assert all(r.state is State.ACCEPTED for r in records), [
            (r.call_node_id, r.state, r.reconciliation_reason) for r in records if not r.is_terminal
        ]
        receipts = [r.call_node_id for r in ledger.receipts()]
        assert sorted(receipts) == sorted(r.call_node_id for r in records)
        assert len(ledger.outbox()) == OPERATIONS
        assert max(r.execution_epoch for r in records) >= 2
        keys = {r.submission_key for r in records}
    with contextlib.closing(sqlite3.connect(store_path)) as db:
        tasks = [key for (key,) in db.execute("SELECT submission_key FROM tasks")]
    assert len(tasks) == OPERATIONS
    assert set(tasks) == keys
