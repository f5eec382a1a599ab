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
import contextlib
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

TASKS_WITH = 20
TASKS_WITHOUT = 10
WITH_POLL_MS = 60_000
WITHOUT_POLL_MS = 2_000
TARGET_MEDIAN_S = 0.050


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _measure(
    directory: Path, *, poll_interval_ms: int, tasks: int, firewall: bool
) -> list[float]:
    import httpx

    from longcall.adapters.webhooks import Verifier, new_hmac_key
    from longcall.core import State
    from longcall.ledger import SQLiteLedger
    from longcall.runtime.engine import CallSpec
    from longcall.runtime.executor import Executor
    from longcall.runtime.webhooks import WebhookReceiver, listen_socket
    from longcall.runtime.webhooks import serve as serve_receiver
    from longcall.server import LongcallServer, running_server
    from longcall.server.webhooks import AddressPolicy, RetryPolicy, WebhookOptions

    key = new_hmac_key(bytes(range(40, 72)))
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
    latencies: list[float] = []
    to_receiver: list[float] = []
    async with running_server(server) as url:
        with SQLiteLedger(directory / "ledger.db", synchronous="normal") as ledger:
            executor = Executor(
                ledger, refresh_interval_s=0.2, push=False, on_change=lambda _n: changed.set()
            )
            receiver = WebhookReceiver(executor, Verifier([key]))
            arrivals: list[float] = []
            handle = receiver.answer

            def timed(*args: Any, **kwargs: Any) -> Any:
                arrivals.append(time.time())
                return handle(*args, **kwargs)

            receiver.answer = timed  # type: ignore[method-assign]
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
                binding = await executor.bind(url, "held", protocol="2026-07-28")
                for index in range(tasks):
                    node = f"n{index}"
                    releases[node] = asyncio.Event()
                    executor.call(
                        CallSpec(call_node_id=node, binding=binding, arguments={"name": node})
                    )
                    while (task_id := executor.engine.records[node].operation_id) is None:
                        changed.clear()
                        await changed.wait()
                    await asyncio.sleep(0.2)  # let the create settle before the release
                    releases[node].set()
                    record = await executor.wait_terminal(node)
                    accepted_at = time.time()
                    assert record.state is State.ACCEPTED
                    stored = await server.store.get(task_id)
                    assert stored is not None
                    latencies.append(accepted_at - stored.last_updated_at)
                    if arrivals:
                        to_receiver.append(arrivals[-1] - stored.last_updated_at)
            finally:
                for event in releases.values():
                    event.set()
                stop.set()
                await runner
                serving.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await serving
                await executor.aclose()
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
