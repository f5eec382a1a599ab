"""Both sides of the webhooks in one process, on 127.0.0.1: the rig that the end-to-end
tests and ``make bench`` (bench_webhooks) drive alike.

Owns: a tool server sending signed deliveries (loopback allowed) with one tool that
finishes when released, an executor with push off (only polls and webhooks remain) and
its receiver, and the endpoint registered at the server pointing at the receiver, or,
behind a "firewall", at a port nobody answers on; and the one measured step,
:func:`completion_to_acceptance`. Must not: judge anything (tests assert, the bench
prints its ratio).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from longcall.adapters.webhooks import HmacKey, Verifier
from longcall.core import State
from longcall.ledger import SQLiteLedger
from longcall.runtime.engine import CallSpec
from longcall.runtime.executor import Executor
from longcall.runtime.webhooks import WebhookReceiver, listen_socket
from longcall.runtime.webhooks import serve as serve_receiver
from longcall.server import LongcallServer, running_server
from longcall.server.webhooks import AddressPolicy, RetryPolicy, WebhookOptions

WAIT_LIMIT_S = 120.0
"""A guard on each wait for the rig's events (a loaded machine is slow, never stuck)."""


@dataclass
class BothSides:
    server: LongcallServer
    url: str
    executor: Executor
    receiver: WebhookReceiver
    releases: dict[str, asyncio.Event]
    changed: asyncio.Event
    arrivals: list[float] = field(default_factory=list)
    """When each delivery reached the receiver (wall clock)."""
    completed_at: dict[str, float] = field(default_factory=dict)
    """Each measured node's terminal write at the server (its ``lastUpdatedAt``)."""


@contextlib.asynccontextmanager
async def both_sides(
    directory: Path, *, key: HmacKey, poll_interval_ms: int, firewall: bool
) -> AsyncIterator[BothSides]:
    """The rig, its files in ``directory``, the endpoint signed with ``key``."""
    server = LongcallServer(
        store=f"sqlite:///{directory / 'tasks.db'}",
        webhooks=WebhookOptions(
            addresses=AddressPolicy(allow_loopback=True),
            retry=RetryPolicy(base_delay_s=0.05, max_delay_s=0.5),
            attempt_timeout_s=2.0,
        ),
    )
    releases: dict[str, asyncio.Event] = {}

    @server.tool(task="required", poll_interval_ms=poll_interval_ms)
    async def held(name: str) -> dict[str, Any]:
        """Finish when released."""
        await releases.setdefault(name, asyncio.Event()).wait()
        return {"name": name}

    changed = asyncio.Event()
    async with running_server(server) as url:
        with SQLiteLedger(directory / "ledger.db", synchronous="normal") as ledger:
            executor = Executor(
                ledger, refresh_interval_s=0.2, push=False, on_change=lambda _n: changed.set()
            )
            receiver = WebhookReceiver(executor, Verifier([key]))
            world = BothSides(server, url, executor, receiver, releases, changed)
            receiver.answer = _timed(receiver.answer, world.arrivals)  # type: ignore[method-assign]
            sock = listen_socket("127.0.0.1", 0)
            port = _free_port() if firewall else sock.getsockname()[1]
            serving = asyncio.create_task(serve_receiver(receiver, sock))
            stop = asyncio.Event()
            runner = asyncio.create_task(executor.run(stop=stop))
            try:
                async with httpx.AsyncClient(timeout=60) as http:
                    made = await http.post(
                        url.removesuffix("/mcp") + "/webhooks/endpoints",
                        json={"url": f"http://127.0.0.1:{port}/webhooks",
                              "secret": key.encoded(), "events": ["completed"]},
                    )  # fmt: skip
                    made.raise_for_status()
                yield world
            finally:
                for event in releases.values():
                    event.set()
                stop.set()
                await runner
                serving.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await serving
                await executor.aclose()


async def started(world: BothSides, node: str) -> str:
    """Call the held tool on ``node``; its task id once the server created it."""
    binding = await world.executor.bind(world.url, "held", protocol="2026-07-28")
    world.releases[node] = asyncio.Event()
    world.executor.call(CallSpec(call_node_id=node, binding=binding, arguments={"name": node}))
    async with asyncio.timeout(WAIT_LIMIT_S):
        while (operation_id := world.executor.engine.records[node].operation_id) is None:
            world.changed.clear()
            await world.changed.wait()
    return operation_id


async def completion_to_acceptance(world: BothSides, node: str, *, settle_s: float = 0.0) -> float:
    """Start ``node``, release its task (``settle_s`` after the create, when given); the
    seconds from the task's terminal write at the server to its acceptance here."""
    task_id = await started(world, node)
    if settle_s > 0:
        await asyncio.sleep(settle_s)
    world.releases[node].set()
    async with asyncio.timeout(WAIT_LIMIT_S):
        record = await world.executor.wait_terminal(node)
    accepted_at = time.time()
    assert record.state is State.ACCEPTED, record
    stored = await world.server.store.get(task_id)
    assert stored is not None
    assert stored.status.is_terminal, stored
    world.completed_at[node] = stored.last_updated_at
    return accepted_at - stored.last_updated_at


def _timed(answer: Callable[..., Any], arrivals: list[float]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        arrivals.append(time.time())
        return answer(*args, **kwargs)

    return timed


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
