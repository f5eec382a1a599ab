"""Several FastMCP processes with ``LongcallTasks`` on one PostgreSQL store (D1): any
process answers any task, each task runs in exactly one process, and the tasks of a
SIGKILLed process are taken over by the others once its leases lapse (idempotent tools
re-run there, once)."""

from __future__ import annotations

import collections
from pathlib import Path

import anyio
import httpx
import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.integrations.conftest import App, RawClient

pytestmark = [pytest.mark.anyio, pytest.mark.postgres, pytest.mark.slow]

PROCESSES = 3
TASKS = 12


def runs(log: Path) -> collections.Counter[str]:
    """How many times each task id started a run (one line per run)."""
    lines = log.read_text().splitlines() if log.exists() else []
    return collections.Counter(line.split()[0] for line in lines)


async def wait_runs(log: Path, total: int, limit_s: float = LOADED_MACHINE_S) -> None:
    with anyio.fail_after(limit_s):
        while sum(runs(log).values()) < total:  # noqa: ASYNC110 (other processes write it)
            await anyio.sleep(0.05)


async def test_processes_share_tasks_and_take_over_a_killed_ones(
    http: httpx.AsyncClient, pg_store_url: str, tmp_path: Path
) -> None:
    """Three processes, one schema: one run per task, reads anywhere, takeover after a kill."""
    apps = [App(pg_store_url, tmp_path, "--lease-s", "1.5") for _ in range(PROCESSES)]
    try:
        for app in apps:
            await app.start()
        log, gate = tmp_path / "runs.log", tmp_path / "gate"
        created: list[tuple[int, str]] = []
        for index in range(TASKS):
            rpc = RawClient(http, apps[index % PROCESSES].url)
            task = await rpc.create("record_run", {"log": str(log), "gate": str(gate)})
            created.append((index % PROCESSES, task["taskId"]))
        await wait_runs(log, TASKS)
        assert set(runs(log).values()) == {1}  # each task started in one process only
        for creator, task_id in created:  # another process answers for it
            other = RawClient(http, apps[(creator + 1) % PROCESSES].url)
            assert (await other.get(task_id))["status"] == "working"
        apps[0].kill()
        killed = {task_id for creator, task_id in created if creator == 0}
        await wait_runs(log, TASKS + len(killed))
        gate.touch()
        survivor = RawClient(http, apps[1].url)
        for _, task_id in created:
            done = await survivor.wait_for(task_id, {"completed", "failed"})
            assert done["status"] == "completed", done
        counts = runs(log)
        assert {t for t, n in counts.items() if n == 2} == killed
        assert {t for t, n in counts.items() if n == 1} == {t for _, t in created} - killed
    finally:
        for app in apps:
            app.stop()
