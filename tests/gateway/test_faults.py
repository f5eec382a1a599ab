"""The gateway under faults, as a separate process where it matters: SIGKILL and restart
mid-call, an upstream that goes away and comes back, a host that disconnects mid-call,
and the same calls over stdio (`longcall gateway --stdio`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import (
    BOUND_S,
    PROCESS_START_S,
    WINDOW_S,
    Host,
    Upstream,
    gateway_argv,
    gateway_at,
    gateway_process,
    servers_file,
    text_of,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

STDIO_HOST_TIMEOUT_S = 120.0
"""langchain starts a gateway process per tool call: its start (imports: many seconds on
a loaded machine) is inside the host's timeout."""


async def until_result(host: Host, reply: dict[str, Any]) -> dict[str, Any]:
    """Follow ``next`` while the call runs (bounded)."""
    async with asyncio.timeout(BOUND_S * 2):
        while "handle" in reply.get("structuredContent", {}) and "next" in reply.get(
            "structuredContent", {}
        ):
            if reply["structuredContent"]["next"]["tool"] != "longcall_status":
                break
            reply = await host.follow(reply)
    return reply


async def test_sigkill_and_restart_mid_call_loses_nothing(
    upstream: Upstream, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    """The gateway is killed while a call runs; restarted, the handle still resolves, a host
    retry attaches to the same call, and the upstream ran once."""
    argv = gateway_argv(tmp_path, servers_file(tmp_path, upstream.url))
    async with gateway_process(argv) as (process, url):
        early = await Host(http, url).call("slow", {"key": "kill", "n": 2})
        handle = early["structuredContent"]["handle"]
        process.send_signal(signal.SIGKILL)
        await process.wait()
    async with gateway_process(argv) as (_, url):
        host = Host(http, url)
        again = await host.call("slow", {"key": "kill", "n": 2})
        assert again["structuredContent"]["handle"] == handle
        upstream.release("kill")
        done = await until_result(
            host, await host.call("longcall_status", {"handle": handle, "wait_s": WINDOW_S})
        )
        assert done["structuredContent"] == {"items": [0, 1]}
    assert upstream.runs["kill"] == 1


REPEAT_GRACE_S = 15.0
"""The grace of the downtime test: longer than a restarted gateway's time from reading
its ledger to answering a host, on a loaded machine."""


async def until_wall_clock(at: float) -> None:
    """Wall time passes until ``at``: the same-call rule is about elapsed time (a lower
    bound, which a loaded machine only makes longer)."""
    await asyncio.sleep(max(0.0, at - time.time()))


async def test_a_retry_after_a_downtime_longer_than_the_grace_attaches(
    upstream: Upstream, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    """The outcome is given, the gateway is killed before the host hears it, and stays
    down longer than two grace periods (past any reading of the grace in wall time). The
    restarted gateway recorded the downtime from the ledger's lease rows, so the host's
    retry still attaches to the call: the upstream ran once. A same call made a grace of
    uptime later is a deliberate repeat and runs again."""
    grace = str(REPEAT_GRACE_S)
    argv = gateway_argv(
        tmp_path,
        servers_file(tmp_path, upstream.url),
        "--repeat-grace",
        grace,
        "--repeat-window",
        grace,
    )
    async with gateway_process(argv) as (process, url):
        first = await Host(http, url).call("quick", {"x": 3})
        given = time.time()
        process.send_signal(signal.SIGKILL)
        await process.wait()
    assert first["structuredContent"] == {"x": 3, "items": [3]}
    await until_wall_clock(given + 2 * REPEAT_GRACE_S + 1)
    async with gateway_process(argv) as (_, url):
        host = Host(http, url)
        retry = await host.call("quick", {"x": 3})
        assert time.time() - given > 2 * REPEAT_GRACE_S
        assert retry["structuredContent"] == first["structuredContent"]
        assert "the tool did not run again" in text_of(retry)
        assert upstream.runs["quick-3"] == 1
        await until_wall_clock(time.time() + 2 * REPEAT_GRACE_S + 1)
        await host.call("quick", {"x": 3})
        assert upstream.runs["quick-3"] == 2


class Proxy:
    """A TCP relay to the upstream that the test can take down and bring back (same port)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.server: asyncio.Server | None = None
        self.pipes: set[asyncio.Task[None]] = set()

    async def up(self) -> None:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def down(self) -> None:
        assert self.server is not None
        self.server.close()
        for pipe in list(self.pipes):
            pipe.cancel()
        await asyncio.gather(*self.pipes, return_exceptions=True)
        await self.server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.pipes.add(task)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self.pipes.discard(task)
            writer.close()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


async def test_an_upstream_down_and_back_mid_call_still_delivers_one_outcome(
    upstream: Upstream, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    """The upstream becomes unreachable while a call runs and comes back: the handle's
    status says it runs, then the result arrives; the upstream ran once."""
    port = int(upstream.url.split(":")[2].split("/")[0])
    proxy = Proxy(port)
    await proxy.up()
    via = f"http://127.0.0.1:{proxy.port}/mcp"
    async with gateway_at(via, tmp_path) as (_, url):
        host = Host(http, url)
        early = await host.call("slow", {"key": "down"})
        handle = early["structuredContent"]["handle"]
        await proxy.down()
        upstream.release("down")
        during = await host.call("longcall_status", {"handle": handle, "wait_s": 0.5})
        assert during["structuredContent"]["state"] == "running"
        await proxy.up()
        done = await until_result(host, during)
        assert done["structuredContent"] == {"items": [0, 1, 2]}
        await proxy.down()
    assert upstream.runs["down"] == 1


async def test_a_host_that_disconnects_mid_call_finds_its_call_again(
    gateway: Any, http: httpx.AsyncClient, upstream: Upstream
) -> None:
    """The host's connection drops inside the window: the upstream goes on (not cancelled,
    not run twice); the host's next same call gets the same handle and then the result."""
    _, url = gateway
    host = Host(http, url)
    dropped = asyncio.ensure_future(host.call("slow", {"key": "gone"}))
    await asyncio.wait_for(upstream.start_seen("gone").wait(), BOUND_S)
    dropped.cancel()  # httpx closes the connection
    with contextlib.suppress(asyncio.CancelledError):
        await dropped
    back = await host.call("slow", {"key": "gone"})
    assert back["structuredContent"]["state"] == "running"
    upstream.release("gone")
    done = await until_result(host, back)
    assert done["structuredContent"] == {"items": [0, 1, 2]}
    assert upstream.runs["gone"] == 1


class StdioHost:
    """A host that starts ``longcall gateway --stdio`` and speaks JSON-RPC lines to it."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.next_id = 0
        self.seen: list[dict[str, Any]] = []

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.next_id += 1
        sent = self.next_id
        line = json.dumps({"jsonrpc": "2.0", "id": sent, "method": method, "params": params})
        self.process.stdin.write(line.encode() + b"\n")
        await self.process.stdin.drain()
        async with asyncio.timeout(PROCESS_START_S):  # the first answer waits for the start
            while True:
                message = json.loads(await self.process.stdout.readline())
                self.seen.append(message)
                if message.get("id") == sent:
                    return message


async def test_stdio_serves_the_same_calls(upstream: Upstream, tmp_path: Path) -> None:
    """Over stdio: initialize, the tools listed, an early return, the result by next,
    progress notifications for a progressToken, and one upstream run."""
    argv = gateway_argv(tmp_path, servers_file(tmp_path, upstream.url), "--stdio")
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "LONGCALL_SERVERS": ""},
    )
    try:
        host = StdioHost(process)
        init = await host.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "stdio-host", "version": "1"},
            },
        )
        assert init["result"]["serverInfo"]
        tools = await host.request("tools/list", {})
        assert "slow" in {t["name"] for t in tools["result"]["tools"]}
        early = await host.request(
            "tools/call",
            {"name": "slow", "arguments": {"key": "stdio"}, "_meta": {"progressToken": "p1"}},
        )
        structured = early["result"]["structuredContent"]
        assert structured["state"] == "running"
        assert "longcall_status" in text_of(early["result"])
        notes = [m for m in host.seen if m.get("method") == "notifications/progress"]
        assert notes
        assert notes[0]["params"]["progressToken"] == "p1"
        upstream.release("stdio")
        reply = early["result"]
        async with asyncio.timeout(BOUND_S * 2):
            while "next" in reply.get("structuredContent", {}):
                step = reply["structuredContent"]["next"]
                answer = await host.request(
                    "tools/call", {"name": step["tool"], "arguments": step["arguments"]}
                )
                reply = answer["result"]
        assert reply["structuredContent"] == {"items": [0, 1, 2]}
        assert upstream.runs["stdio"] == 1
    finally:
        if process.stdin is not None:
            process.stdin.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(BOUND_S):
                await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_langchain_starts_the_gateway_over_stdio_and_follows_next(
    upstream: Upstream, tmp_path: Path
) -> None:
    """langchain-mcp-adapters starts `longcall gateway --stdio` itself, as hosts do (a
    process per tool call, each one taking the ledger over from the last): the retry
    after its timeout gets the early return, next leads to the result, one run."""
    from test_hosts import HERE, hosts_venv, start_host

    argv = gateway_argv(tmp_path, servers_file(tmp_path, upstream.url), "--stdio")
    host = await start_host(
        hosts_venv(),
        HERE / "hosts" / "py_host.py",
        "langchain",
        json.dumps(argv),
        "slow",
        json.dumps({"key": "lc-stdio", "n": 2}),
        0.5,
        STDIO_HOST_TIMEOUT_S,
    )
    try:
        assert (await host.until("attempt", STDIO_HOST_TIMEOUT_S))["timed_out"]
        early = await host.until("early", STDIO_HOST_TIMEOUT_S)
        assert "longcall_status" in json.dumps(early["early"])
        upstream.release("lc-stdio")
        done = await host.until("result", STDIO_HOST_TIMEOUT_S * 3)
        assert "[0, 1]" in json.dumps(done["result"]) or "[0,1]" in json.dumps(done["result"])
    finally:
        await host.stop()
    assert upstream.runs["lc-stdio"] == 1
