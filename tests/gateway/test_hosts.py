"""Task-unaware hosts built on real packages, through the gateway (G1): each times out on
its first try, retries, gets an early return, follows `next` to the result — and the
upstream ran once per call, retries included.

The Python hosts (langchain-mcp-adapters, pydantic-ai, openai-agents) need the mcp 1.x
SDK, which cannot share the project's venv (mcp 2.x): they run in interop/hosts/.venv,
built by `make hosts` (a part of `make test`). The TypeScript SDK client runs on the
interop Node.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path

import httpx
import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.interop.harness import NODE, ROOT

from conftest import BOUND_S, Host, Upstream, gateway_at, start_host, text_of
from longcall.gateway import Gateway

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

HERE = Path(__file__).parent
HOSTS_PYTHON = ROOT / "interop" / "hosts" / ".venv" / "bin" / "python"
SHORT_TIMEOUT_S = 0.5
TIMEOUT_S = 10.0


def hosts_venv() -> Path:
    if not HOSTS_PYTHON.exists():
        pytest.fail(f"the host packages are not installed ({HOSTS_PYTHON}): run `make hosts`")
    return HOSTS_PYTHON


@pytest.mark.parametrize("package", ["langchain", "pydantic-ai", "openai-agents"])
async def test_a_python_host_times_out_retries_and_follows_next_to_the_result(
    package: str, gateway: tuple[Gateway, str], upstream: Upstream
) -> None:
    """langchain-mcp-adapters, pydantic-ai and openai-agents: early return on the retry,
    next followed to the result, one upstream run for both tries."""
    gw, url = gateway
    key = f"host-{package}"
    host = await start_host(
        hosts_venv(),
        HERE / "hosts" / "py_host.py",
        package,
        url,
        "slow",
        json.dumps({"key": key, "n": 2}),
        SHORT_TIMEOUT_S,
        TIMEOUT_S,
    )
    try:
        first = await host.until("attempt")
        assert first["timed_out"], first
        early = await host.until("early")
        print(f"{package}: early return {early['took_s']:.2f} s after the retry was sent")
        shown = json.dumps(early["early"])
        assert "lc-" in shown
        assert "longcall_status" in shown
        upstream.release(key)
        done = await host.until("result")
        assert "[0, 1]" in json.dumps(done["result"]) or "[0,1]" in json.dumps(done["result"])
        assert upstream.runs[key] == 1
        print(f"{package}: upstream runs for the call chain: {upstream.runs[key]}")
    finally:
        await host.stop()
    assert gw.metrics.retries_attached._value.get() >= 1


TS_HOST = ROOT / "interop" / "gateway-host.mjs"


@pytest.mark.skipif(sys.platform != "linux", reason="the interop Node is a Linux build")
async def test_the_typescript_sdk_client_follows_next_and_the_upstream_runs_once(
    gateway: tuple[Gateway, str], upstream: Upstream
) -> None:
    """The TypeScript SDK client (default 60 s request timeout; here a short first try and
    a retry) gets the early return and follows next to the result."""
    if not NODE.exists():
        pytest.fail(f"the interop peers are not installed ({NODE}): run `make interop`")
    _, url = gateway
    host = await start_host(
        NODE, TS_HOST, "plain", url, "slow", json.dumps({"key": "ts", "n": 2}), SHORT_TIMEOUT_S
    )
    try:
        first = await host.until("attempt")
        assert first["timed_out"], first
        early = await host.until("early")
        assert early["early"]["structuredContent"]["state"] == "running"
        upstream.release("ts")
        done = await host.until("result")
        assert done["result"]["structuredContent"] == {"items": [0, 1]}
        assert upstream.runs["ts"] == 1
    finally:
        await host.stop()


async def test_the_typescript_sdk_tasks_client_gets_a_task_whatever_the_upstream_speaks(
    gateway: tuple[Gateway, str], upstream: Upstream
) -> None:
    """A task-aware host (TypeScript SDK experimental.tasks, 2025-11-25): the call is a
    task at the gateway, its status follows the upstream, its result is the upstream's."""
    if not NODE.exists():
        pytest.fail(f"the interop peers are not installed ({NODE}): run `make interop`")
    _, url = gateway
    host = await start_host(
        NODE, TS_HOST, "tasks", url, "slow", json.dumps({"key": "ts-task", "n": 3}), TIMEOUT_S
    )
    try:
        created = await host.until("taskCreated")
        assert created["taskCreated"]["status"] == "working"
        await asyncio.wait_for(upstream.start_seen("ts-task").wait(), BOUND_S)
        upstream.release("ts-task")
        done = await host.until("result")
        assert done["result"]["structuredContent"] == {"items": [0, 1, 2]}
        assert upstream.runs["ts-task"] == 1
    finally:
        await host.stop()


async def test_a_task_aware_host_gets_the_upstream_question_passed_through(
    gateway: tuple[Gateway, str],
) -> None:
    """The upstream asks for input: the TypeScript SDK tasks client is asked the same
    question (its form), answers it, and the task ends with the upstream's result."""
    if not NODE.exists():
        pytest.fail(f"the interop peers are not installed ({NODE}): run `make interop`")
    _, url = gateway
    host = await start_host(NODE, TS_HOST, "tasks", url, "ask", "{}", TIMEOUT_S)
    try:
        asked = await host.until("elicited")
        assert asked["elicited"]["message"] == "Approve the deploy?"
        assert asked["elicited"]["requestedSchema"]["required"] == ["approved"]
        done = await host.until("result")
        assert done["result"]["structuredContent"] == {"approved": True}
    finally:
        await host.stop()


MCP1_UPSTREAM = ROOT / "interop" / "hosts" / "mcp1_upstream.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_an_mcp_1_30_upstream_plain_tool_is_served_durably(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    """An upstream on the mcp 1.30 SDK (FastMCP, no tasks): its plain tool returns early
    through the gateway, and next leads to its result; it ran once."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        str(hosts_venv()),
        str(MCP1_UPSTREAM),
        str(port),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        async with asyncio.timeout(LOADED_MACHINE_S):  # imports the mcp 1.x SDK first
            while b"Uvicorn running on" not in await process.stderr.readline():
                pass
        upstream_url = f"http://127.0.0.1:{port}/mcp"
        async with gateway_at(upstream_url, tmp_path) as (_, url):
            host = Host(http, url)
            early = await host.call("plain_slow", {"key": "k"})
            assert early["structuredContent"]["state"] == "running", early
            release = await Host(http, upstream_url).call("release", {"key": "k"})
            assert "1" in text_of(release)
            reply = early
            async with asyncio.timeout(BOUND_S * 2):
                while "next" in reply.get("structuredContent", {}):
                    reply = await host.follow(reply)
            assert text_of(reply) == "plain k done after 1 run(s)"
    finally:
        if process.stdin is not None:
            process.stdin.close()
        async with asyncio.timeout(BOUND_S):
            await process.wait()


REAL_WINDOW_S = 40.0
"""The gateway's default early-return window."""
HOST_TIMEOUT_S = 60.0
"""The usual request timeout of these hosts (the TypeScript SDK's default)."""
TOOL_S = 75.0
"""How long the upstream tool runs: past the window and past every host's timeout."""


async def test_every_host_at_its_own_timeout_in_front_of_a_75_s_tool(
    upstream: Upstream, tmp_path: Path
) -> None:
    """At the real numbers (a 75 s tool, 60 s host timeouts with one retry, the default
    40 s window), all four hosts at once: each first try gets the early return before
    its timeout, a retry attaches to the same call (and gets the result or the next
    step, whichever its window meets), ``next`` leads to the result, and each call chain
    ran the upstream once."""
    if not NODE.exists():
        pytest.fail(f"the interop peers are not installed ({NODE}): run `make interop`")
    async with gateway_at(upstream.url, tmp_path, window=REAL_WINDOW_S) as (gw, url):
        loop = asyncio.get_running_loop()
        started = loop.time()
        packages = ("langchain", "pydantic-ai", "openai-agents", "typescript")
        # The upstream tool of each call runs TOOL_S from now: it ends then, not earlier.
        for package in packages:
            loop.call_at(started + TOOL_S, upstream.release, f"real-{package}")
        hosts = {
            package: await start_host(
                hosts_venv(),
                HERE / "hosts" / "py_host.py",
                package,
                url,
                "slow",
                json.dumps({"key": f"real-{package}", "n": 2}),
                HOST_TIMEOUT_S,
                HOST_TIMEOUT_S,
            )
            for package in ("langchain", "pydantic-ai", "openai-agents")
        }
        hosts["typescript"] = await start_host(
            NODE, TS_HOST, "once", url, "slow", json.dumps({"key": "real-typescript", "n": 2})
        )
        try:
            for package, host in hosts.items():
                if package == "typescript":
                    early = await host.until("early", bound_s=REAL_WINDOW_S + BOUND_S)
                    assert early["early"]["structuredContent"]["state"] == "running"
                    continue
                # Answered before the host's 60 s while the tool runs 75 s: an early return.
                first = await host.until("attempt", bound_s=REAL_WINDOW_S + BOUND_S)
                assert not first["timed_out"], (package, first)
            for package, host in hosts.items():
                done = await host.until("result", bound_s=TOOL_S + BOUND_S)
                assert "[0, 1]" in json.dumps(done["result"]) or "[0,1]" in json.dumps(
                    done["result"]
                ), (package, done)
            took_s = loop.time() - started
        finally:
            for host in hosts.values():
                await host.stop()
        assert {package: upstream.runs[f"real-{package}"] for package in hosts} == dict.fromkeys(
            hosts, 1
        )
        assert gw.metrics.retries_attached._value.get() >= 3
    print(f"four hosts at their own timeouts: every result after {took_s:.0f} s, one run each")
