"""Fixtures of the gateway tests: an upstream whose tools finish when the test says, a
gateway in front of it (both on 127.0.0.1), a plain 2025-11-25 JSON-RPC host, and hosts
in child processes (the Node ones on the interop Node of `make interop`)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import re
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.interop.harness import (
    inspector_argv,
    inspector_env,
    tasks_host_argv,
)

from longcall.adapters.servers import ServerConfig, ServersConfig
from longcall.gateway import Gateway, GatewayOptions
from longcall.server import (
    Authenticator,
    LongcallServer,
    TaskContext,
    ToolProtocolError,
    running_server,
    token_principal,
)

LEGACY = "2025-11-25"
MODERN = "2026-07-28"
WINDOW_S = 2.0
"""The early-return window of the tests (the default is 40 s)."""
BOUND_S = LOADED_MACHINE_S
"""The most any one awaited event may take on a loaded 2-core machine."""


@dataclass
class Upstream:
    """The upstream's tools' runs, and the gates that let them finish."""

    url: str = ""
    runs: collections.Counter[str] = field(default_factory=collections.Counter)
    started: dict[str, asyncio.Event] = field(default_factory=dict)
    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    cancelled: dict[str, asyncio.Event] = field(default_factory=dict)

    def gate(self, key: str) -> asyncio.Event:
        return self.gates.setdefault(key, asyncio.Event())

    def start_seen(self, key: str) -> asyncio.Event:
        return self.started.setdefault(key, asyncio.Event())

    def cancel_seen(self, key: str) -> asyncio.Event:
        return self.cancelled.setdefault(key, asyncio.Event())

    def release(self, key: str) -> None:
        self.gate(key).set()


def upstream_server(
    upstream: Upstream, store: str, authenticator: Authenticator = token_principal
) -> LongcallServer:
    """``longcall serve``'s library with tools a test controls: ``slow`` (tasks) and
    ``plain`` (no tasks) finish when released; ``quick``, ``empty``, ``big``, ``ask``."""
    server = LongcallServer(store=store, authenticator=authenticator)

    @server.tool(task="optional")
    async def slow(ctx: TaskContext, key: str, n: int = 3) -> dict[str, Any]:
        """A long report: n items once the test releases `key`."""
        upstream.runs[key] += 1
        upstream.start_seen(key).set()
        await ctx.report_progress(1, 4, "step 1/4")
        try:
            await upstream.gate(key).wait()
        except asyncio.CancelledError:
            upstream.cancel_seen(key).set()
            raise
        return {"items": list(range(n))}

    @server.tool(task="forbidden")
    async def plain(key: str) -> str:
        """A plain tool (no tasks) that finishes when released."""
        upstream.runs[key] += 1
        upstream.start_seen(key).set()
        await upstream.gate(key).wait()
        return f"plain {key} done"

    @server.tool(task="optional")
    async def quick(x: int) -> dict[str, Any]:
        """Answers at once."""
        upstream.runs[f"quick-{x}"] += 1
        return {"x": x, "items": [x]}

    @server.tool(task="optional")
    async def empty() -> dict[str, Any]:
        """Finds nothing."""
        return {"items": []}

    @server.tool(task="optional")
    async def big(chars: int) -> str:
        """A long text."""
        return "".join(str(i % 10) for i in range(chars))

    @server.tool(task="optional")
    async def refuse() -> str:
        """Refuses every call with a protocol error."""
        raise ToolProtocolError(-32602, "Invalid params: no such report")

    @server.tool(task="optional")
    async def ask(ctx: TaskContext) -> dict[str, Any]:
        """Asks for approval first."""
        form = {
            "type": "object",
            "properties": {"approved": {"type": "boolean", "description": "Go ahead?"}},
            "required": ["approved"],
        }
        answer = await ctx.elicit("Approve the deploy?", form)
        return {"approved": answer.get("content", {}).get("approved")}

    return server


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def upstream(tmp_path: Path) -> AsyncIterator[Upstream]:
    state = Upstream()
    async with running_server(upstream_server(state, str(tmp_path / "up.db"))) as url:
        state.url = url
        yield state


def servers_of(url: str) -> ServersConfig:
    return ServersConfig(servers={"up": ServerConfig(name="up", url=url)})


@contextlib.asynccontextmanager
async def gateway_at(
    upstream_url: str, tmp_path: Path, *, servers: ServersConfig | None = None, **options: Any
) -> AsyncIterator[tuple[Gateway, str]]:
    """A gateway in front of ``upstream_url`` (or of ``servers``), served on 127.0.0.1."""
    gateway = Gateway(
        servers=servers or servers_of(upstream_url),
        ledger=f"sqlite:///{tmp_path / 'gateway.db'}",
        task_store=str(tmp_path / "gateway-tasks.db"),
        options=GatewayOptions(early_return_s=options.pop("window", WINDOW_S), **options),
    )
    async with gateway, gateway.running() as url:
        yield gateway, url


@pytest.fixture
async def gateway(upstream: Upstream, tmp_path: Path) -> AsyncIterator[tuple[Gateway, str]]:
    async with gateway_at(upstream.url, tmp_path) as pair:
        yield pair


LONGCALL = Path(sys.executable).parent / "longcall"
ANNOUNCED = re.compile(r"at (http://\S+/mcp)")
PROCESS_START_S = 120.0
"""A gateway process's start (imports, the ledger, listing the upstream): many seconds on
a loaded 2-core machine."""


def servers_file(tmp_path: Path, url: str) -> Path:
    """A TOML servers file naming ``url`` as the upstream ``up``."""
    path = tmp_path / "servers.toml"
    path.write_text(f'[servers.up]\nurl = "{url}"\n')
    return path


def gateway_argv(tmp_path: Path, servers: Path, *more: str) -> list[str]:
    """``longcall gateway`` on a ledger and task store in ``tmp_path``, the test window."""
    return [
        str(LONGCALL),
        "gateway",
        "--servers",
        str(servers),
        "--ledger",
        f"sqlite:///{tmp_path / 'gateway.db'}",
        "--task-store",
        str(tmp_path / "gateway-tasks.db"),
        "--early-return",
        str(WINDOW_S),
        "--lease-seconds",
        "1",
        *more,
    ]


@contextlib.asynccontextmanager
async def gateway_process(
    argv: list[str], *, log: Path | None = None, env: dict[str, str] | None = None
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """``longcall gateway --port 0`` in a child process; yields it and its /mcp URL. Its
    log (stderr) goes to ``log`` when given."""
    with contextlib.ExitStack() as files:
        stderr = files.enter_context(log.open("wb")) if log else asyncio.subprocess.DEVNULL
        process = await asyncio.create_subprocess_exec(
            *argv, "--port", "0", stdout=asyncio.subprocess.PIPE, stderr=stderr, env=env
        )
    try:
        assert process.stdout is not None
        async with asyncio.timeout(PROCESS_START_S):
            line = (await process.stdout.readline()).decode()
        match = ANNOUNCED.search(line)
        assert match, line
        yield process, match.group(1)
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


class Host:
    """A task-unaware host speaking plain 2025-11-25 JSON-RPC over Streamable HTTP."""

    def __init__(self, http: httpx.AsyncClient, url: str, token: str | None = None) -> None:
        self.http = http
        self.url = url
        self.token = token
        self._ids = itertools.count(1)

    async def rpc(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": LEGACY}
        if self.token is not None:
            headers["authorization"] = f"Bearer {self.token}"
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": next(self._ids), "method": method}
        if params is not None:
            body["params"] = params
        answer = await self.http.post(self.url, json=body, headers=headers, timeout=BOUND_S)
        payload: dict[str, Any] = answer.json()
        return payload

    async def call(self, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        payload = await self.rpc("tools/call", {"name": tool, "arguments": arguments or {}})
        assert "result" in payload, payload
        result: dict[str, Any] = payload["result"]
        return result

    async def follow(self, reply: dict[str, Any]) -> dict[str, Any]:
        """Call what ``next`` names."""
        step = reply["structuredContent"]["next"]
        return await self.call(step["tool"], step["arguments"])


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client


def text_of(result: dict[str, Any]) -> str:
    return "\n".join(b["text"] for b in result.get("content", []) if b.get("type") == "text")


class HostProcess:
    """A host in a child process, read line by line (one JSON event a line)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.events: list[dict[str, Any]] = []

    async def until(self, key: str, bound_s: float = BOUND_S) -> dict[str, Any]:
        """The first event with ``key`` (bounded; the host's output so far on failure)."""
        assert self.process.stdout is not None
        try:
            async with asyncio.timeout(bound_s):
                while True:
                    for event in self.events:
                        if key in event:
                            return event
                    line = await self.process.stdout.readline()
                    if not line:
                        break
                    try:
                        self.events.append(json.loads(line))
                    except ValueError:  # a banner or a log line, kept for the failure
                        self.events.append({"line": line.decode(errors="replace")})
        except TimeoutError:
            pass
        stderr = b""
        if (self.process.stderr is not None and not self.events) or key == "result":
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2):
                    await self.process.wait()
        if self.process.stderr is not None and self.process.returncode is not None:
            stderr = await self.process.stderr.read()
        raise AssertionError(f"no {key!r} from the host: {self.events} {stderr[-3000:]!r}")

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()


async def start_host(*argv: str | Path, env: dict[str, str] | None = None) -> HostProcess:
    process = await asyncio.create_subprocess_exec(
        *map(str, argv),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    return HostProcess(process)


async def start_inspector(
    url: str, era: str, tool: str, arguments: dict[str, Any], home: Path
) -> HostProcess:
    """The MCP Inspector CLI calling ``tool`` at ``url`` in protocol era ``era``."""
    return await start_host(*inspector_argv(url, era, tool, arguments), env=inspector_env(home))


async def start_tasks_host(
    url: str, tool: str, arguments: dict[str, Any], *flags: str
) -> HostProcess:
    """``interop/tasks-host.mjs``: the TypeScript SDK 2.x client with ext-tasks."""
    return await start_host(*tasks_host_argv(url, tool, arguments, *flags))
