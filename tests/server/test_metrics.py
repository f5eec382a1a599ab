"""Server metrics: real servers driven by real MCP requests, scraped over HTTP (O3).

Every count is asserted exactly; the exposition must parse as Prometheus text.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from conftest import (
    POLL_STEP_S,
    STARTUP_LIMIT_S,
    LegacyClient,
    ManualClock,
    ModernClient,
    announced,
    start_logged,
    wait_ready,
)
from longcall.server import (
    LongcallServer,
    ServerOptions,
    TaskContext,
    build_reference_server,
    running_server,
)

pytestmark = pytest.mark.anyio

FORM = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
MODERN = "2026-07-28"
LEGACY = "2025-11-25"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of a Prometheus text exposition (it must parse)."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; a labelled counter never bumped reads 0."""
    return samples.get((name, frozenset(labels.items())), 0.0)


async def scrape(http: httpx.AsyncClient, url: str) -> Samples:
    response = await http.get(url)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return parse(response.text)


async def refused_requests(http: httpx.AsyncClient, url: str, *, oversized_bytes: int) -> None:
    """One oversized body, one unparseable body, one malformed Authorization header."""
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": MODERN}
    big = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "pad": "' + b"x" * oversized_bytes
    response = await http.post(
        url, content=big + b'"}', headers={**headers, "content-type": "application/json"}
    )
    assert response.status_code == 413
    response = await http.post(
        url, content=b"{not json", headers={**headers, "content-type": "application/json"}
    )
    assert response.status_code == 400
    response = await http.post(
        url,
        json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        headers={**headers, "authorization": "Basic c2VjcmV0"},
    )
    assert response.status_code == 401


def metered_server(
    store: str, clock: Callable[[], float]
) -> tuple[LongcallServer, dict[str, asyncio.Event]]:
    """A server whose ``hold`` task ends when the test says, and an ``ask`` that elicits."""
    server = LongcallServer(store=store, options=ServerOptions(max_body_bytes=16_384), clock=clock)
    gates: dict[str, asyncio.Event] = {}

    @server.tool(task="required")
    async def hold(name: str) -> dict[str, Any]:
        await gates.setdefault(name, asyncio.Event()).wait()
        return {"released": name}

    @server.tool(task="required")
    async def ask(ctx: TaskContext) -> dict[str, Any]:
        return await ctx.elicit("ok?", FORM)

    return server, gates


async def test_counts_of_a_served_process_move_by_exactly_what_was_done(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    clock = ManualClock()
    clock.now = float(int(clock.now))  # a whole second: the read rate is per whole second
    server, gates = metered_server(str(tmp_path / "tasks.db"), clock)
    async with running_server(server) as url:
        port = server.metrics.serve(0)
        metrics_url = f"http://127.0.0.1:{port}/metrics"
        modern = ModernClient(http, url)
        first = (await modern.create("hold", {"name": "first"}))["taskId"]
        second = (await modern.create("hold", {"name": "second"}))["taskId"]
        asked = (await modern.create("ask", {}))["taskId"]
        for _ in range(3):
            assert (await modern.get(first))["status"] == "working"
        await modern.wait_status(asked, {"input_required"})
        clock.advance(1)  # the three reads are now in the last whole seconds

        samples = await scrape(http, metrics_url)
        created = "longcall_server_tasks_created_total"
        assert value(samples, created, tool="hold", protocol=MODERN) == 2
        assert value(samples, created, tool="ask", protocol=MODERN) == 1
        assert value(samples, "longcall_server_tasks_open", status="working") == 2
        assert value(samples, "longcall_server_tasks_open", status="input_required") == 1
        assert value(samples, "longcall_server_status_reads_total", protocol=MODERN) == 3
        assert value(samples, "longcall_server_status_read_rate_per_second") == pytest.approx(0.3)
        assert value(samples, "longcall_server_input_requests_total", where="task") == 1
        assert value(samples, "longcall_server_input_responses_total", where="task") == 0
        assert (
            value(samples, "longcall_server_tasks_ended_total", tool="hold", status="completed")
            == 0
        )

        # The second is cancelled 1 s after creation; the first completes after 90 s.
        assert (await modern.result("tasks/cancel", {"taskId": second})) is not None
        await modern.wait_status(second, {"cancelled"})
        clock.advance(89)
        gates.setdefault("first", asyncio.Event()).set()
        await modern.wait_status(first, {"completed"})
        await modern.result(
            "tasks/cancel", {"taskId": first}
        )  # already completed: acked, no change
        key = next(iter((await modern.get(asked))["inputRequests"]))
        answer = {key: {"action": "accept", "content": {"ok": True}}}
        await modern.result("tasks/update", {"taskId": asked, "inputResponses": answer})
        await modern.wait_status(asked, {"completed"})
        await refused_requests(http, url, oversized_bytes=20_000)
        clock.advance(10)  # the first three reads left the rate's window, the fourth is in it

        samples = await scrape(http, metrics_url)
    ended = "longcall_server_tasks_ended_total"
    assert value(samples, ended, tool="hold", status="completed") == 1
    assert value(samples, ended, tool="hold", status="cancelled") == 1
    assert value(samples, ended, tool="ask", status="completed") == 1
    assert value(samples, ended, tool="hold", status="failed") == 0
    duration = "longcall_server_task_duration_seconds"
    assert value(samples, f"{duration}_bucket", tool="hold", le="1.0") == 1
    assert value(samples, f"{duration}_bucket", tool="hold", le="60.0") == 1
    assert value(samples, f"{duration}_bucket", tool="hold", le="120.0") == 2
    assert value(samples, f"{duration}_count", tool="hold") == 2
    assert value(samples, f"{duration}_sum", tool="hold") == pytest.approx(91)
    assert value(samples, f"{duration}_count", tool="ask") == 1
    assert value(samples, "longcall_server_task_duration_median_seconds") == pytest.approx(90)
    cancels = "longcall_server_cancel_requests_total"
    assert value(samples, cancels, outcome="cancelled") == 1
    assert value(samples, cancels, outcome="already_terminal") == 1
    assert value(samples, "longcall_server_cancel_acknowledgement_seconds_count") == 1
    refused = "longcall_server_requests_refused_total"
    assert value(samples, refused, reason="oversized") == 1
    assert value(samples, refused, reason="bad_json") == 1
    assert value(samples, refused, reason="unauthorized") == 1
    assert value(samples, "longcall_server_input_requests_total", where="task") == 1
    assert value(samples, "longcall_server_input_responses_total", where="task") == 1
    assert value(samples, "longcall_server_status_reads_total", protocol=MODERN) == 4
    assert value(samples, "longcall_server_status_read_rate_per_second") == pytest.approx(0.1)
    assert value(samples, "longcall_server_tasks_open", status="working") == 0
    assert value(samples, "longcall_server_tasks_open", status="input_required") == 0
    assert value(samples, "longcall_server_completions_lost_total") == 0
    # The metrics stopped with the server.
    assert server.metrics.port is None
    with pytest.raises(httpx.ConnectError):
        await http.get(metrics_url)


async def test_a_restarted_server_counts_the_tasks_it_took_over(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    """Stopped with two running tasks, the next process on the store reruns the idempotent
    one and fails the other (it may have had effects): one takeover of each outcome."""
    store = str(tmp_path / "tasks.db")
    release = asyncio.Event()

    def build() -> LongcallServer:
        server = LongcallServer(store=store)

        @server.tool(task="required", idempotent=True)
        async def again() -> str:
            await release.wait()
            return "again"

        @server.tool(task="required", idempotent=False)
        async def once() -> str:
            await release.wait()
            return "once"

        return server

    async with running_server(build()) as url:
        modern = ModernClient(http, url)
        rerun = (await modern.create("again", {}))["taskId"]
        lost = (await modern.create("once", {}))["taskId"]
    restarted = build()
    async with running_server(restarted) as url:
        modern = ModernClient(http, url)
        assert (await modern.wait_status(lost, {"failed"}))["status"] == "failed"
        release.set()
        assert (await modern.wait_status(rerun, {"completed"}))["status"] == "completed"
        port = restarted.metrics.serve(0)
        samples = await scrape(http, f"http://127.0.0.1:{port}/metrics")
    takeovers = "longcall_server_task_takeovers_total"
    assert value(samples, takeovers, outcome="rerun") == 1
    assert value(samples, takeovers, outcome="owner_lost") == 1
    assert value(samples, "longcall_server_tasks_ended_total", tool="once", status="failed") == 1
    assert (
        value(samples, "longcall_server_tasks_ended_total", tool="again", status="completed") == 1
    )
    # Created by the first process, not this one.
    assert value(samples, "longcall_server_tasks_created_total", tool="again", protocol=MODERN) == 0


async def test_a_takeover_between_processes_on_postgresql_is_counted_by_the_taker(
    pg_store_url: str, http: httpx.AsyncClient
) -> None:
    """Two servers on one PostgreSQL store: the one that stops hands its lease back, the
    other takes the task over and reruns it; each counts only its own part."""
    release = asyncio.Event()

    def build() -> LongcallServer:
        server = LongcallServer(store=pg_store_url, options=ServerOptions(lease_s=0.6))

        @server.tool(task="required", idempotent=True)
        async def again() -> str:
            await release.wait()
            return "again"

        return server

    stopping, taker = build(), build()
    async with running_server(taker) as taker_url:
        async with running_server(stopping) as url:
            task = (await ModernClient(http, url).create("again", {}))["taskId"]
        release.set()
        modern = ModernClient(http, taker_url)
        assert (await modern.wait_status(task, {"completed"}))["status"] == "completed"
        port = taker.metrics.serve(0)
        samples = await scrape(http, f"http://127.0.0.1:{port}/metrics")
    created = "longcall_server_tasks_created_total"
    assert value(samples, "longcall_server_task_takeovers_total", outcome="rerun") == 1
    assert (
        value(samples, "longcall_server_tasks_ended_total", tool="again", status="completed") == 1
    )
    assert value(samples, created, tool="again", protocol=MODERN) == 0
    gone = parse(generate_latest(stopping.metrics.registry).decode())
    assert value(gone, created, tool="again", protocol=MODERN) == 1
    assert value(gone, "longcall_server_tasks_ended_total", tool="again", status="completed") == 0
    assert value(gone, "longcall_server_task_takeovers_total", outcome="rerun") == 0


async def test_rounds_before_a_task_count_asked_and_answered_inputs(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    server = LongcallServer(store=str(tmp_path / "tasks.db"))

    @server.tool(task="forbidden")
    async def confirm(ctx: TaskContext) -> str:
        answer = await ctx.elicit("sure?", FORM, key="sure")
        return str(answer["content"]["ok"])

    async with running_server(server) as url:
        modern = ModernClient(http, url)
        first = await modern.result("tools/call", {"name": "confirm", "arguments": {}})
        assert first["resultType"] == "input_required"
        answer = {"sure": {"action": "accept", "content": {"ok": True}}}
        params = {
            "name": "confirm",
            "arguments": {},
            "inputResponses": answer,
            "requestState": first["requestState"],
        }
        second = await modern.result("tools/call", params)
        assert second.get("resultType") == "complete", second
        port = server.metrics.serve(0)
        samples = await scrape(http, f"http://127.0.0.1:{port}/metrics")
    assert value(samples, "longcall_server_input_requests_total", where="round") == 1
    assert value(samples, "longcall_server_input_responses_total", where="round") == 1
    assert value(samples, "longcall_server_input_requests_total", where="task") == 0


async def test_library_serve_exposes_metrics_and_stops_them_with_the_server(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    server = build_reference_server(store=str(tmp_path / "tasks.db"))
    serving = asyncio.get_running_loop().create_task(
        server.serve(host="127.0.0.1", port=free_port(), metrics_port=0)
    )
    try:
        with anyio.fail_after(STARTUP_LIMIT_S):
            while server.metrics.port is None:
                assert not serving.done(), serving
                await anyio.sleep(POLL_STEP_S)  # bounded: serve() gives no event to wait on
        port = server.metrics.port
        samples = await scrape(http, f"http://127.0.0.1:{port}/metrics")
        assert value(samples, "longcall_server_tasks_open", status="working") == 0
    finally:
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving
    assert server.metrics.port is None
    with pytest.raises(httpx.ConnectError):
        await http.get(f"http://127.0.0.1:{port}/metrics")


# ---- the command ------------------------------------------------------------------------------


def free_port() -> int:
    """A port that was free a moment ago on 127.0.0.1 (the server binds it itself)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
async def test_longcall_serve_metrics_port(tmp_path: Path, http: httpx.AsyncClient) -> None:
    """``longcall serve --metrics-port 0`` announces its metrics URL on stderr; both task
    protocols, a cancel, a poll and an oversized request are counted; the port closes
    when the server stops."""
    port = free_port()
    store = f"sqlite:///{tmp_path / 'serve.db'}"
    stderr = tmp_path / "stderr.txt"
    command = "from longcall.cli import main; main()"
    argv = [sys.executable, "-c", command, "serve", "--store", store, "--port", str(port)]
    argv += ["--metrics-port", "0"]
    process = start_logged(argv, stderr, stream="stderr")
    try:
        metrics_url = await announced(process, stderr, r"metrics at (http://\S+/metrics)")
        assert metrics_url.startswith("http://127.0.0.1:")
        url = f"http://127.0.0.1:{port}/mcp"
        modern = ModernClient(http, url)
        legacy = LegacyClient(http, url)
        await wait_ready(process, modern)
        crawl = (await modern.create("crawl", {"pages": 0, "items_per_page": 0}))["taskId"]
        await modern.wait_status(crawl, {"completed"})
        await modern.get(crawl)
        await modern.get(crawl)
        slow = await legacy.create("sleep_report", {"seconds": 60, "rows": 1})
        assert (await legacy.result("tasks/cancel", {"taskId": slow["taskId"]}))["status"] == (
            "cancelled"
        )
        await legacy.result("tasks/get", {"taskId": slow["taskId"]})
        failing = await legacy.create("fail", {"kind": "tool"})
        final = await legacy.final(failing["taskId"])
        assert final["result"]["isError"] is True, json.dumps(final)
        await refused_requests(http, url, oversized_bytes=4 * 1024 * 1024 + 1)

        samples = await scrape(http, metrics_url)
        created = "longcall_server_tasks_created_total"
        assert value(samples, created, tool="crawl", protocol=MODERN) == 1
        assert value(samples, created, tool="sleep_report", protocol=LEGACY) == 1
        assert value(samples, created, tool="fail", protocol=LEGACY) == 1
        ended = "longcall_server_tasks_ended_total"
        assert value(samples, ended, tool="crawl", status="completed") == 1
        assert value(samples, ended, tool="sleep_report", status="cancelled") == 1
        assert value(samples, ended, tool="fail", status="failed") == 1  # 2025-11-25: isError
        assert value(samples, "longcall_server_task_duration_seconds_count", tool="crawl") == 1
        assert value(samples, "longcall_server_cancel_requests_total", outcome="cancelled") == 1
        assert value(samples, "longcall_server_cancel_acknowledgement_seconds_count") == 1
        assert value(samples, "longcall_server_status_reads_total", protocol=MODERN) == 2
        assert value(samples, "longcall_server_status_reads_total", protocol=LEGACY) == 1
        refused = "longcall_server_requests_refused_total"
        assert value(samples, refused, reason="oversized") == 1
        assert value(samples, refused, reason="bad_json") == 1
        assert value(samples, refused, reason="unauthorized") == 1
        assert value(samples, "longcall_server_tasks_open", status="working") == 0
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=20)
    with pytest.raises(httpx.ConnectError):
        await http.get(metrics_url)
