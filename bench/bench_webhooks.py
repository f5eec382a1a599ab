"""Webhooks, both sides (X3, S7): completion → acceptance with and without the receiver.

A tool server (this process, SQLite store, loopback deliveries allowed) with one tool
that finishes when released; an executor (push off: only polls and webhooks remain)
and its webhook receiver on 127.0.0.1. Each task is started, released, and timed from
its terminal write at the server (``lastUpdatedAt``) to its acceptance in the ledger.

1. **With the receiver**, ``pollIntervalMs`` = 60,000: acceptance comes from the signed
   delivery (sender → receiver → a poll now). Target (issue 24): median ≤ 50 ms.
2. **Without it** (the endpoint behind a "firewall": nothing answers at its port),
   ``pollIntervalMs`` = 2,000: polling alone; expected about half the interval.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
from pathlib import Path

TASKS_WITH = 20
TASKS_WITHOUT = 10
WITH_POLL_MS = 60_000
WITHOUT_POLL_MS = 2_000
TARGET_MEDIAN_S = 0.050


async def _measure(
    directory: Path, *, poll_interval_ms: int, tasks: int, firewall: bool
) -> list[float]:
    from longcall.adapters.webhooks import new_hmac_key
    from longcall.testing.webhooks import both_sides, completion_to_acceptance

    key = new_hmac_key(bytes(range(40, 72)))
    latencies: list[float] = []
    to_receiver: list[float] = []
    rig = both_sides(directory, key=key, poll_interval_ms=poll_interval_ms, firewall=firewall)
    async with rig as world:
        for node in (f"n{index}" for index in range(tasks)):
            # The create settles before the release: the figure is the completion's alone.
            latencies.append(await completion_to_acceptance(world, node, settle_s=0.2))
            if world.arrivals:
                # The last delivery is this task's: the others were accepted before.
                to_receiver.append(world.arrivals[-1] - world.completed_at[node])
    if to_receiver:
        print(f"  of which completion→delivery at the receiver: median"
              f" {statistics.median(to_receiver) * 1000:.0f} ms")  # fmt: skip
    return latencies


def _line(name: str, latencies: list[float], poll_ms: int) -> str:
    median = statistics.median(latencies)
    return (
        f"{name}: completion→acceptance median {median * 1000:.0f} ms"
        f" (min {min(latencies) * 1000:.0f}, max {max(latencies) * 1000:.0f};"
        f" {len(latencies)} tasks, pollIntervalMs {poll_ms})"
    )


def run() -> None:
    with tempfile.TemporaryDirectory() as first, tempfile.TemporaryDirectory() as second:
        with_receiver = asyncio.run(
            _measure(Path(first), poll_interval_ms=WITH_POLL_MS, tasks=TASKS_WITH, firewall=False)
        )
        without = asyncio.run(
            _measure(
                Path(second), poll_interval_ms=WITHOUT_POLL_MS, tasks=TASKS_WITHOUT, firewall=True
            )
        )
    print(_line("with the receiver", with_receiver, WITH_POLL_MS))
    print(_line("receiver firewalled (polling only)", without, WITHOUT_POLL_MS))
    median = statistics.median(with_receiver)
    verdict = "met" if median <= TARGET_MEDIAN_S else "NOT met"
    print(f"target median ≤ {TARGET_MEDIAN_S * 1000:.0f} ms with the receiver: {verdict}")


if __name__ == "__main__":
    run()
