"""A store that is locked, deleted or shared: no stalled request, no false outcome, no theft.

Each test here failed before store I/O left the event loop (a held lock stalled every
request and ended tasks with ``isError: "database is locked"``), before the store had an
identity (a deleted file went unnoticed and a restart answered "never created"), before
running tasks were leased (a second server failed the first one's tasks as "restarted"),
and before the facades kept their state in the store (AIP-151 deletes and Apify-style
time-outs were lost with the process).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from tests.bounds import LOADED_MACHINE_S

from conftest import ManualClock, ModernClient
from longcall.server import LongcallServer, SqliteTaskStore, build_reference_server, running_server
from longcall.server.aip151 import mount_aip151
from longcall.server.apify import mount_apify
from longcall.server.examples import register_reference_tools

pytestmark = pytest.mark.anyio

SUBMISSION_KEY = "dev.longcall/submissionKey"
LOG_WAIT_LIMIT_S = LOADED_MACHINE_S


class LogWatch(logging.Handler):
    """Sets an event when a record containing ``fragment`` is logged (the server's retries)."""

    def __init__(self, fragment: str) -> None:
        super().__init__(logging.WARNING)
        self.fragment = fragment
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.fragment in record.getMessage():
            self.seen.set()


def gated_server(store: Any, gate: asyncio.Event, **options: Any) -> LongcallServer:
    """A server whose one tool ``gated`` (not idempotent) finishes when the test opens the gate."""
    server = LongcallServer(store=store, **options)

    @server.tool(task="required")
    async def gated() -> dict[str, Any]:
        await gate.wait()
        return {"done": True}

    return server


async def test_a_locked_store_stalls_no_request_and_fails_no_task(
    http: httpx.AsyncClient, tmp_path: Path
) -> None:
    """While another connection holds the write lock: other requests are answered, a create
    is 503 + Retry-After, and the running task's result waits for the lock, not lost."""
    path = tmp_path / "locked.db"
    gate = asyncio.Event()
    server = gated_server(SqliteTaskStore(path, busy_timeout_s=1.0), gate)
    async with running_server(server) as url:
        client = ModernClient(http, url)
        task = await client.create("gated", {})
        watch = LogWatch(f"could not finish task {task['taskId']}")
        logging.getLogger("longcall.server.tasks").addHandler(watch)
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            create = asyncio.create_task(client.post("tools/call", {"name": "gated"}))
            await client.result("server/discover")
            assert not create.done()  # the event loop was free while the create waited
            refused = await create
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == -32603
            gate.set()
            with anyio.fail_after(LOG_WAIT_LIMIT_S):
                await watch.seen.wait()  # the terminal write met the lock and will retry
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
            logging.getLogger("longcall.server.tasks").removeHandler(watch)
        done = await client.wait_status(task["taskId"], {"completed", "failed"})
    assert done["status"] == "completed"
    assert done["result"]["structuredContent"] == {"done": True}
    assert done["result"]["isError"] is False


async def test_a_deleted_store_fails_closed_and_its_successor_has_another_identity(
    http: httpx.AsyncClient, tmp_path: Path
) -> None:
    """Creations into a deleted file are refused; after a restart the lookup names a new store."""
    path = tmp_path / "tasks.db"
    async with running_server(build_reference_server(store=str(path))) as url:
        client = ModernClient(http, url)
        meta = {SUBMISSION_KEY: "node-1:step-1"}
        await client.create("crawl", {"pages": 0, "items_per_page": 0}, meta=meta)
        before = await client.result("longcall/tasks/lookup", {"submissionKey": "node-1:step-1"})
        assert before["found"] is True
        discover = await client.result("server/discover")
        advertised = discover["capabilities"]["extensions"][SUBMISSION_KEY]
        assert advertised["storeId"] == before["storeId"]
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(f"{path}{suffix}")
        created = await client.post(
            "tools/call",
            {"name": "crawl", "arguments": {"pages": 0, "items_per_page": 0}},
            meta={SUBMISSION_KEY: "node-1:step-2"},
        )
        assert created.status_code == 503
        lookup = await client.post("longcall/tasks/lookup", {"submissionKey": "node-1:step-1"})
        assert lookup.status_code == 503
    async with running_server(build_reference_server(store=str(path))) as url:
        after = await ModernClient(http, url).result(
            "longcall/tasks/lookup", {"submissionKey": "node-1:step-1"}
        )
    assert after["found"] is False
    assert after["storeId"] != before["storeId"]  # not a proof about the old store


async def test_a_second_server_leaves_the_first_ones_running_task_alone(
    http: httpx.AsyncClient, tmp_path: Path
) -> None:
    """A second process on the same store neither fails nor re-runs a task the first runs."""
    path = str(tmp_path / "shared.db")
    gate = asyncio.Event()
    first = gated_server(path, gate)
    second = gated_server(path, gate)
    async with running_server(first) as first_url:
        task = await ModernClient(http, first_url).create("gated", {})
        async with running_server(second) as second_url:
            other = ModernClient(http, second_url)
            assert (await other.get(task["taskId"]))["status"] == "working"
            gate.set()
            # Finished by the first process, seen through the second (store poll).
            done = await other.wait_status(task["taskId"], {"completed", "failed"})
            assert done["status"] == "completed"
        history = await first.store.history(task["taskId"])
    assert [change.reason for change in history] == [
        f"created by {first.manager.owner}",
        "tool returned",
    ]


def facades(path: str, clock: ManualClock) -> LongcallServer:
    """The reference tools on /mcp, /v1 and /apify/mcp, on a manual clock (Apify at 1:1)."""
    server = LongcallServer(store=path, clock=clock)
    register_reference_tools(server)
    mount_aip151(server)
    mount_apify(server, time_scale=1.0)
    return server


def apify_call(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A ``tools/call`` body for the Apify-style endpoint."""
    params = {"name": tool, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


async def test_facade_state_outlives_the_process_and_follows_the_server_clock(
    http: httpx.AsyncClient, tmp_path: Path
) -> None:
    """An AIP-151 delete and an Apify-style ``timeoutSecs`` hold after a restart, on its clock."""
    path = str(tmp_path / "facades.db")
    clock = ManualClock()
    async with running_server(facades(path, clock)) as url:
        base = url.removesuffix("/mcp")
        started = await http.post(
            f"{base}/v1/tools/crawl:start", json={"arguments": {"pages": 0, "items_per_page": 0}}
        )
        name = started.json()["name"]
        assert (await http.delete(f"{base}/v1/{name}")).status_code == 200
        run = await http.post(
            f"{base}/apify/mcp",
            json=apify_call(
                "longcall--sleep-report",
                {"seconds": 600, "rows": 1, "waitSecs": 0, "timeoutSecs": 5},
            ),
        )
        run_id = run.json()["result"]["structuredContent"]["runId"]
    async with running_server(facades(path, clock)) as url:
        base = url.removesuffix("/mcp")
        assert (await http.get(f"{base}/v1/{name}")).status_code == 404
        clock.advance(11)  # past timeoutSecs + the 5 s grace, on the server's clock only
        observed = await http.post(
            f"{base}/apify/mcp", json=apify_call("get-actor-run", {"runId": run_id, "waitSecs": 0})
        )
    assert observed.json()["result"]["structuredContent"]["status"] == "TIMED-OUT"
