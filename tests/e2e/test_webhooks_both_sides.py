"""Both sides of the webhooks on 127.0.0.1: a tool server's sender delivers each status
change, signed, to the caller's receiver, which only wakes the poll (X3, S7).

With the poll interval set to a minute, a completed task is accepted long before any
planned poll; with the deliveries dropped by a "firewall", polling alone still accepts
every task. (The completion → acceptance medians are ``make bench``'s: bench_webhooks.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests.bounds import LOADED_MACHINE_S

from longcall.adapters.webhooks import new_hmac_key
from longcall.core import State
from longcall.testing.webhooks import both_sides, completion_to_acceptance, started

pytestmark = pytest.mark.anyio

KEY = new_hmac_key(bytes(range(7, 39)))
MINUTE_MS = 60_000
TASKS = 5


async def test_a_delivery_gets_each_completed_task_accepted_long_before_the_poll(
    tmp_path: Path,
) -> None:
    """Poll interval one minute, push off: every task is accepted within seconds of its
    completion, through one verified delivery each, long before any planned poll."""
    async with both_sides(tmp_path, key=KEY, poll_interval_ms=MINUTE_MS, firewall=False) as world:
        latencies = [await completion_to_acceptance(world, f"n{i}") for i in range(TASKS)]
        assert world.receiver.counts["hinted"] == TASKS
    print("completion → acceptance (s):", [round(x, 3) for x in latencies])
    assert max(latencies) < MINUTE_MS / 1000 / 4  # a guard: only a delivery explains it


async def test_behind_a_firewall_polling_still_accepts_every_task(tmp_path: Path) -> None:
    """Every delivery dropped (nothing answers at the endpoint's port): each task is
    still accepted, by its polls; the receiver took nothing."""
    async with both_sides(tmp_path, key=KEY, poll_interval_ms=200, firewall=True) as world:
        nodes = [f"n{i}" for i in range(TASKS)]
        for node in nodes:
            await started(world, node)
            world.releases[node].set()
        async with asyncio.timeout(LOADED_MACHINE_S):
            records = [await world.executor.wait_terminal(node) for node in nodes]
        assert world.receiver.counts["hinted"] == 0
        listed = await world.server.store.list_deliveries("anonymous")  # type: ignore[attr-defined]
    assert all(record.state is State.ACCEPTED for record in records)
    assert len(listed) == TASKS
    assert all(
        d.last_outcome is None or d.last_outcome.value == "connection_refused" for d in listed
    )
