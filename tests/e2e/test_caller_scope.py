"""Two callers, one node name, one server: two operations, each its own result (C2).

Regression: submission keys came from the node id alone, so a second ledger calling
``c1`` with the same arguments got the first caller's operation and result, and one
with other arguments was accepted as a protocol error ("submission key already used").
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from longcall.core import State
from longcall.ledger import SQLiteLedger
from longcall.runtime.executor import Executor
from longcall.server import build_reference_server

from .conftest import call_to_terminal, serve

pytestmark = pytest.mark.anyio


async def call_once(url: str, ledger_path: Path, rows: int) -> tuple[State, object]:
    with SQLiteLedger(ledger_path, synchronous="normal") as ledger:
        executor = Executor(ledger, refresh_interval_s=0.2)
        try:
            arguments = {"seconds": 0.1, "rows": rows}
            record = await call_to_terminal(executor, url, "c1", "sleep_report", arguments)
            return record.state, json.loads(ledger.result_payload("c1") or b"null")
        finally:
            await executor.aclose()


async def test_the_same_node_name_in_two_ledgers_is_two_operations(tmp_path: Path) -> None:
    """Each caller gets its own operation and its own result."""
    server = build_reference_server(store=f"sqlite:///{tmp_path / 'tasks.db'}")
    async with serve(server.asgi_app()) as url:
        first = await call_once(url, tmp_path / "a.db", rows=1)
        second = await call_once(url, tmp_path / "b.db", rows=3)
        same_args = await call_once(url, tmp_path / "c.db", rows=1)
    assert first[0] is second[0] is same_args[0] is State.ACCEPTED
    assert first[1] != second[1]
    assert "rows" in json.dumps(second[1])
    with sqlite3.connect(tmp_path / "tasks.db") as store:
        (tasks,) = store.execute("SELECT count(*) FROM tasks").fetchone()
    assert tasks == 3  # the same arguments from a third caller are a third operation
