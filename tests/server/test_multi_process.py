"""Three ``longcall serve`` processes on one PostgreSQL store; one is SIGKILLed mid-run (D1).

A client spreads 1,000 task creations over the three URLs round-robin, each with its own
submission key; a creation that meets the dead process is sent to the next URL with the
same key. Afterwards, from the store's own history: every task ended exactly once, no
task was created twice, and a task was taken over (re-run) only from the killed process,
once, after its lease — a task whose process lived was never run a second time.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from test_restart import free_port
from tests.bounds import LOADED_MACHINE_S

from conftest import ModernClient
from longcall.server.model import TaskStatus
from longcall.server.store import open_store

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.postgres]

PROCESSES = 3
TASKS = 1_000
LEASE_S = 2.0
KILL_AFTER = 400
"""Creations acknowledged before the second process is killed (its tasks are mid-run)."""
CONCURRENCY = 24
PRINCIPALS = 4
STARTUP_LIMIT_S = 180.0
"""Generous: three servers starting together on a loaded 2-core machine took over 30 s."""
SETTLE_LIMIT_S = LOADED_MACHINE_S
SUBMISSION_KEY = "dev.longcall/submissionKey"


class Serve:
    """One ``longcall serve`` child process."""

    def __init__(self, store_url: str, log: Path, *, lease_s: float = LEASE_S) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._log = log.open("wb")
        command = "from longcall.cli import main; main()"
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                command,
                "serve",
                "--store",
                store_url,
                "--port",
                str(self.port),
                "--lease-seconds",
                str(lease_s),
            ],
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.killed_at: float | None = None

    async def wait_ready(
        self, http: httpx.AsyncClient, *, limit_s: float = STARTUP_LIMIT_S
    ) -> None:
        """Bounded poll: a separate process gives no event to wait on."""
        deadline = time.monotonic() + limit_s
        client = ModernClient(http, self.url)
        while True:
            try:
                await client.result("server/discover")
                return
            except httpx.TransportError:
                assert self.process.poll() is None, "server exited"
                assert time.monotonic() < deadline, "server did not start"
                await anyio.sleep(0.05)  # bounded poll of a separate process

    def kill(self) -> None:
        self.killed_at = time.time()
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._log.close()


@pytest.fixture
def servers(pg_store_url: str, tmp_path: Path) -> Iterator[list[Serve]]:
    """Three server processes on one fresh PostgreSQL schema."""
    started = [Serve(pg_store_url, tmp_path / f"serve-{index}.log") for index in range(PROCESSES)]
    yield started
    for serve in started:
        serve.stop()


async def submit_all(http: httpx.AsyncClient, servers: list[Serve]) -> dict[str, str]:
    """Create every task round-robin; a dead URL is skipped with the same key (S3)."""
    rng = random.Random(12)
    created: dict[str, str] = {}
    limiter = asyncio.Semaphore(CONCURRENCY)

    async def create(index: int) -> None:
        key = f"node-{index}:step-0"
        arguments = {"seconds": round(rng.uniform(0.5, 1.5), 2), "rows": 1}
        token = f"caller-{index % PRINCIPALS}"
        failures: list[str] = []
        async with limiter:
            for attempt in range(PROCESSES):
                serve = servers[(index + attempt) % PROCESSES]
                client = ModernClient(http, serve.url, token=token)
                try:
                    task = await client.create(
                        "sleep_report", arguments, meta={SUBMISSION_KEY: key}
                    )
                except (httpx.TransportError, AssertionError) as exc:
                    failures.append(f"{serve.url}: {exc!r}"[:300])
                    continue  # that process is gone (or answered mid-kill): next URL
                created[key] = task["taskId"]
                if len(created) == KILL_AFTER:
                    servers[1].kill()
                return
            raise AssertionError(f"no server accepted {key}: {failures}")

    async with anyio.create_task_group() as group:
        for index in range(TASKS):
            group.start_soon(create, index)
    return created


async def test_three_processes_one_killed_every_task_ends_once(
    servers: list[Serve], pg_store_url: str, http: httpx.AsyncClient
) -> None:
    """1,000 tasks over three processes, one SIGKILLed: each ends once, none runs twice."""
    for serve in servers:
        await serve.wait_ready(http)
    created = await submit_all(http, servers)
    assert len(created) == TASKS
    assert len(set(created.values())) == TASKS

    store = open_store(pg_store_url)
    try:
        deadline = time.monotonic() + SETTLE_LIMIT_S
        while True:
            still_open = store.run_sync(
                lambda conn: conn.execute(
                    "SELECT owner, count(*) FROM tasks"
                    " WHERE status IN ('working', 'input_required') GROUP BY owner"
                ).fetchall()
            )
            if not still_open:
                break
            assert time.monotonic() < deadline, f"open tasks by owner: {still_open}"
            await anyio.sleep(0.25)  # bounded poll of three other processes
        rows = store.run_sync(
            lambda conn: conn.execute("SELECT task_id, status, result FROM tasks").fetchall()
        )
        histories = {task_id: await store.history(task_id) for task_id in created.values()}
    finally:
        store.close()

    assert len(rows) == TASKS  # no retry with a known key created a second task
    assert {row[1] for row in rows} == {TaskStatus.COMPLETED.value}
    killed = servers[1]
    assert killed.killed_at is not None
    dead_owner = f"/{killed.process.pid}/"
    taken_over = 0
    for task_id, history in histories.items():
        assert sum(change.status.is_terminal for change in history) == 1, task_id
        starts = [c for c in history if c.reason and c.reason.startswith(("created", "claimed"))]
        claims = starts[1:]
        assert starts[0].reason is not None
        assert starts[0].reason.startswith("created by")
        assert len(claims) <= 1, (task_id, starts)  # never a third run
        for claim in claims:
            assert claim.reason is not None
            assert claim.reason.endswith(dead_owner + claim.reason.rsplit("/", 1)[-1]), claim
            assert dead_owner in starts[0].reason  # only the dead process's tasks are re-run
            assert claim.at >= killed.killed_at  # never while their owner lived
            taken_over += 1
    assert taken_over > 0  # the kill met running tasks, and they were taken over
    sample = ModernClient(http, servers[0].url, token="caller-0")
    task = await sample.get(created["node-0:step-0"])
    assert task["result"]["structuredContent"] == {"rows": [{"index": 0, "value": 0}]}
