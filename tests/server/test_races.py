"""Races: cancel against completion never shows a terminal status changing (S4)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest

from conftest import LegacyClient, ModernClient
from longcall.server import LongcallServer, SqliteTaskStore, running_server
from longcall.server.model import NewTask, ProtocolVersion
from longcall.server.states import Cause

pytestmark = pytest.mark.anyio

ROUNDS = 40
TERMINAL = {"completed", "failed", "cancelled"}


def racing_server(store_path: str, gates: dict[str, asyncio.Event]) -> LongcallServer:
    """A tool that completes the moment the test opens its gate (so completion meets cancel)."""
    server = LongcallServer(store=store_path)

    @server.tool(task="required")
    async def race(name: str) -> dict[str, Any]:
        await gates.setdefault(name, asyncio.Event()).wait()
        return {"done": name}

    return server


async def test_modern_cancel_versus_completion(http: httpx.AsyncClient, store_path: str) -> None:
    """2026-07-28: whoever wins, the first terminal status observed is the only one ever seen."""
    gates: dict[str, asyncio.Event] = {}
    server = racing_server(store_path, gates)
    async with running_server(server) as url:
        client = ModernClient(http, url)
        for round_index in range(ROUNDS):
            name = f"m{round_index}"
            task = await client.create("race", {"name": name})
            seen: list[str] = []

            async def observe(task_id: str = task["taskId"], seen: list[str] = seen) -> None:
                seen.extend([(await client.get(task_id))["status"] for _ in range(4)])

            async with anyio.create_task_group() as group:
                group.start_soon(observe)
                gates.setdefault(name, asyncio.Event()).set()
                group.start_soon(client.result, "tasks/cancel", {"taskId": task["taskId"]})
                group.start_soon(observe)
            final = await client.get(task["taskId"])
            seen.append(final["status"])
            terminal = [status for status in seen if status in TERMINAL]
            assert set(terminal) == {final["status"]}, seen
            history = await server.store.history(task["taskId"])
            assert sum(change.status.is_terminal for change in history) == 1


async def test_legacy_cancel_answer_matches_the_final_status(
    http: httpx.AsyncClient, store_path: str
) -> None:
    """2025-11-25: a cancelled answer means cancelled forever; a -32602 means the completion
    won. A third of the rounds make cancel win, a third make completion win, the rest
    race: both answers must be seen, each with its final status."""
    gates: dict[str, asyncio.Event] = {}
    server = racing_server(store_path, gates)
    outcomes: set[str] = set()
    async with running_server(server) as url:
        client = LegacyClient(http, url)
        for round_index in range(ROUNDS):
            name = f"l{round_index}"
            task = await client.create("race", {"name": name})
            gate = gates.setdefault(name, asyncio.Event())
            made = round_index % 3
            if made == 1:  # completion first: the tool has returned before the cancel
                gate.set()
                await _until_terminal(client, task["taskId"])
            elif made == 2:  # a race: the tool returns as the cancel arrives
                gate.set()
            payload = (await client.post("tasks/cancel", {"taskId": task["taskId"]})).json()
            gate.set()  # the cancel-first rounds let the tool go only now
            final = await client.result("tasks/get", {"taskId": task["taskId"]})
            expected = {0: "cancelled", 1: "completed"}.get(made)
            assert expected is None or final["status"] == expected, (made, final)
            if "result" in payload:
                assert payload["result"]["status"] == final["status"] == "cancelled"
            else:
                assert payload["error"]["code"] == -32602
                assert final["status"] == "completed"
            outcomes.add(final["status"])
            result = await client.final(task["taskId"])
            assert ("error" in result) == (final["status"] == "cancelled")
    assert outcomes == {"cancelled", "completed"}


STATUS_READS_MAX = 2_000


async def _until_terminal(client: LegacyClient, task_id: str) -> None:
    """Read the task until its status is terminal (bounded: a tool that returned at once)."""
    for _ in range(STATUS_READS_MAX):
        if (await client.result("tasks/get", {"taskId": task_id}))["status"] in TERMINAL:
            return
        await anyio.lowlevel.checkpoint()
    raise AssertionError(f"task {task_id} did not end after {STATUS_READS_MAX} reads")


def test_store_cas_between_two_connections(tmp_path: Any) -> None:
    """Two connections (threads) race complete vs cancel on one file: exactly one terminal wins."""
    path = str(tmp_path / "race.db")
    first, second = SqliteTaskStore(path), SqliteTaskStore(path)
    winners: list[str] = []
    try:
        for index in range(60):
            task_id = f"race-{index}"
            asyncio.run(first.create(_new_task(task_id), owner="a", lease_until=time.time() + 60))
            barrier = threading.Barrier(2)

            def attempt(
                store: SqliteTaskStore,
                cause: Cause,
                task_id: str = task_id,
                barrier: threading.Barrier = barrier,
            ) -> None:
                barrier.wait()
                won = asyncio.run(store.transition(task_id, cause, now=time.time()))
                if won is not None:
                    winners.append(won.status.value)

            threads = [
                threading.Thread(target=attempt, args=(first, Cause.TOOL_RETURNED)),
                threading.Thread(target=attempt, args=(second, Cause.CANCEL_REQUESTED)),
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=10)
            history = asyncio.run(first.history(task_id))
            assert sum(change.status.is_terminal for change in history) == 1
            record = asyncio.run(second.get(task_id))
            assert record is not None
            assert record.status.value == winners[-1]
        assert len(winners) == 60
    finally:
        first.close()
        second.close()


def _new_task(task_id: str) -> NewTask:
    return NewTask(
        task_id=task_id,
        principal="anonymous",
        tool_name="race",
        arguments={},
        arguments_digest="0",
        protocol=ProtocolVersion.MODERN,
        submission_key=None,
        created_at=time.time(),
        ttl_ms=60_000,
        poll_interval_ms=100,
    )
