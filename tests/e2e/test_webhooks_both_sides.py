"""Both sides of the webhooks on 127.0.0.1: a tool server's sender delivers each status
change, signed, to the caller's receiver, which only wakes the poll (X3, S7).

With the poll interval set to a minute, a completed task is accepted long before any
planned poll; with the deliveries dropped by a "firewall", polling alone still accepts
every task. (The completion → acceptance medians are ``make bench``'s: bench_webhooks.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.webhook_peer import free_port

from longcall.adapters.webhooks import Verifier, new_hmac_key
from longcall.core import State
from longcall.ledger import SQLiteLedger
from longcall.runtime.engine import CallSpec
from longcall.runtime.executor import Executor
from longcall.runtime.webhooks import WebhookReceiver, listen_socket
from longcall.runtime.webhooks import serve as serve_receiver
from longcall.server import LongcallServer, running_server
from longcall.server.webhooks import AddressPolicy, RetryPolicy, WebhookOptions

pytestmark = pytest.mark.anyio

KEY = new_hmac_key(bytes(range(7, 39)))
MINUTE_MS = 60_000
TASKS = 5


@dataclass
class BothSides:
    server: LongcallServer
    url: str
    executor: Executor
    receiver: WebhookReceiver
    releases: dict[str, asyncio.Event]
    changed: asyncio.Event


@asynccontextmanager
async def both_sides(
    tmp_path: Path, *, poll_interval_ms: int, firewall: bool
) -> AsyncIterator[BothSides]:
    """A tool server sending webhooks (loopback allowed), an executor with push off (only
    polls and webhooks remain) and its receiver; the endpoint registered at the server
    points at the receiver, or, behind the firewall, at a port nobody answers on."""
    server = LongcallServer(
        store=f"sqlite:///{tmp_path / 'tasks.db'}",
        webhooks=WebhookOptions(
            addresses=AddressPolicy(allow_loopback=True),
            retry=RetryPolicy(base_delay_s=0.05, max_delay_s=0.5),
            attempt_timeout_s=2.0,
        ),
    )
    releases: dict[str, asyncio.Event] = {}

    @server.tool(task="required", poll_interval_ms=poll_interval_ms)
    async def held(name: str) -> dict[str, Any]:
        """Finish when the test releases it."""
        await releases.setdefault(name, asyncio.Event()).wait()
        return {"name": name}

    changed = asyncio.Event()
    async with running_server(server) as url:
        with SQLiteLedger(tmp_path / "ledger.db", synchronous="normal") as ledger:
            executor = Executor(
                ledger, refresh_interval_s=0.2, push=False, on_change=lambda _n: changed.set()
            )
            receiver = WebhookReceiver(executor, Verifier([KEY]))
            sock = listen_socket("127.0.0.1", 0)
            port = free_port() if firewall else sock.getsockname()[1]
            serving = asyncio.create_task(serve_receiver(receiver, sock))
            stop = asyncio.Event()
            runner = asyncio.create_task(executor.run(stop=stop))
            try:
                async with httpx.AsyncClient(timeout=60) as http:
                    made = await http.post(
                        url.removesuffix("/mcp") + "/webhooks/endpoints",
                        json={"url": f"http://127.0.0.1:{port}/webhooks",
                              "secret": KEY.encoded(), "events": ["completed"]},
                    )  # fmt: skip
                    assert made.status_code == 201, made.text
                yield BothSides(server, url, executor, receiver, releases, changed)
            finally:
                for event in releases.values():
                    event.set()
                stop.set()
                await runner
                serving.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await serving
                await executor.aclose()


async def started(world: BothSides, node: str) -> str:
    binding = await world.executor.bind(world.url, "held", protocol="2026-07-28")
    world.releases[node] = asyncio.Event()
    world.executor.call(CallSpec(call_node_id=node, binding=binding, arguments={"name": node}))
    async with asyncio.timeout(LOADED_MACHINE_S):
        while (operation_id := world.executor.engine.records[node].operation_id) is None:
            world.changed.clear()
            await world.changed.wait()
    return operation_id


async def completion_to_acceptance(world: BothSides, node: str) -> float:
    """Release the task; seconds from its terminal write at the server to its acceptance."""
    task_id = await started(world, node)
    world.releases[node].set()
    async with asyncio.timeout(LOADED_MACHINE_S):
        record = await world.executor.wait_terminal(node)
    accepted_at = time.time()
    assert record.state is State.ACCEPTED
    stored = await world.server.store.get(task_id)
    assert stored is not None
    assert stored.status.is_terminal
    return accepted_at - stored.last_updated_at


async def test_a_delivery_gets_each_completed_task_accepted_long_before_the_poll(
    tmp_path: Path,
) -> None:
    """Poll interval one minute, push off: every task is accepted within seconds of its
    completion, through one verified delivery each, long before any planned poll."""
    async with both_sides(tmp_path, poll_interval_ms=MINUTE_MS, firewall=False) as world:
        latencies = [await completion_to_acceptance(world, f"n{i}") for i in range(TASKS)]
        assert world.receiver.counts["hinted"] == TASKS
    print("completion → acceptance (s):", [round(x, 3) for x in latencies])
    assert max(latencies) < MINUTE_MS / 1000 / 4  # a guard: only a delivery explains it


async def test_behind_a_firewall_polling_still_accepts_every_task(tmp_path: Path) -> None:
    """Every delivery dropped (nothing answers at the endpoint's port): each task is
    still accepted, by its polls; the receiver took nothing."""
    async with both_sides(tmp_path, poll_interval_ms=200, firewall=True) as world:
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
