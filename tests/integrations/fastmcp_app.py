"""A FastMCP app whose tasks run on ``LongcallTasks`` (the app a FastMCP user has, with
the one-line swap), served as a child process:
``python fastmcp_app.py STORE_URL PORT_FILE [--auth] [--lease-s N] [--ttl-s N] [--port N]
[--backend fastmcp-tasks]``.

``--backend fastmcp-tasks`` serves the same tools on fastmcp-tasks' ``TasksExtension``
(``memory://``, STORE_URL unused) instead: the parity peer, where it can be installed.

It binds a free 127.0.0.1 port, writes the port to PORT_FILE once serving, and serves
MCP at /mcp until stopped. ``--auth`` requires one of the bearer tokens in ``TOKENS``
(FastMCP's own ``StaticTokenVerifier``).
"""

from __future__ import annotations

# The tool bodies below stand for slow work: they poll a gate file the test creates (a
# separate process gives them no event) and append to small log files.
# ruff: noqa: ASYNC110, ASYNC230, ASYNC240
import argparse
import asyncio
import os
import socket
from datetime import timedelta
from pathlib import Path
from typing import Any

import mcp_types
import uvicorn
from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier
from fastmcp.utilities.tasks import TaskConfig
from mcp.shared.exceptions import MCPError

from longcall.integrations.fastmcp import LongcallTasks
from longcall.server.options import ServerOptions

FAST = TaskConfig(mode="required", poll_interval=timedelta(milliseconds=100))
TOKENS = {
    "token-alice": {"client_id": "app", "scopes": [], "sub": "alice"},
    "token-alice-2": {"client_id": "app", "scopes": [], "sub": "alice"},
    "token-bob": {"client_id": "app", "scopes": [], "sub": "bob"},
}
IDEMPOTENT = {"idempotentHint": True}


def build(
    store: str, *, auth: bool, lease_s: float, ttl_s: float | None, backend: str = "longcall"
) -> FastMCP:
    """The app: the tools a FastMCP user writes, unchanged, plus the one extension line."""
    verifier = StaticTokenVerifier(tokens=TOKENS) if auth else None
    mcp = FastMCP("longcall-fastmcp-app", auth=verifier)
    options = ServerOptions(lease_s=lease_s)
    if backend == "fastmcp-tasks":
        from fastmcp_tasks import TasksExtension

        mcp.add_extension(TasksExtension(url="memory://"))
    elif ttl_s is None:
        mcp.add_extension(LongcallTasks(store=store, options=options))
    else:
        mcp.add_extension(LongcallTasks(store=store, ttl=timedelta(seconds=ttl_s), options=options))

    @mcp.tool(task=FAST)
    async def add(a: int, b: int) -> dict[str, Any]:
        """Add two numbers as a task."""
        return {"sum": a + b}

    @mcp.tool(task=FAST)
    async def tool_error() -> str:
        """End in a tool error (isError)."""
        raise ToolError("bad input (tool-level)")

    @mcp.tool(task=FAST)
    async def protocol_error() -> str:
        """End in a JSON-RPC error (task failed)."""
        raise MCPError(-32603, "upstream rate limit", {"retryAfter": 5})

    @mcp.tool(task=FAST)
    async def ask_name(ctx: Context) -> Any:
        """Ask for a name (FastMCP's guard pattern), then greet."""
        answers = ctx.input_responses
        if not answers:
            form = mcp_types.ElicitRequestFormParams(
                mode="form",
                message="Please enter your name.",
                requested_schema={
                    "type": "object",
                    "properties": {"name": {"type": "string"}},
                    "required": ["name"],
                },
            )
            return mcp_types.InputRequiredResult(
                input_requests={"name": mcp_types.ElicitRequest(params=form)},
                request_state="asked-once",
            )
        content = getattr(answers["name"], "content", None) or {}
        return f"Hello, {content.get('name')}! ({ctx.request_state})"

    @mcp.tool(task=FAST)
    async def ask_colour(ctx: Context) -> str:
        """Ask with ctx.elicit from inside the running task."""
        answer = await ctx.elicit("Favourite colour?", str)
        return f"colour: {getattr(answer, 'data', None)}"

    @mcp.tool(task=FAST)
    async def steps(gate: str, ctx: Context) -> str:
        """Report progress, then wait for the gate file to exist, then finish."""
        await ctx.report_progress(1, 2, "step 1 of 2")
        while not Path(gate).exists():
            await asyncio.sleep(0.02)
        await ctx.report_progress(2, 2, "step 2 of 2")
        return "stepped"

    @mcp.tool(task=FAST, annotations=IDEMPOTENT)
    async def count_runs(log: str, gate: str) -> str:
        """Idempotent: append a line per run to ``log``, wait for ``gate``, finish."""
        with Path(log).open("a") as out:
            out.write("run\n")
        while not Path(gate).exists():
            await asyncio.sleep(0.02)
        return f"runs: {len(Path(log).read_text().splitlines())}"

    @mcp.tool(task=FAST, annotations=IDEMPOTENT)
    async def record_run(log: str, gate: str, ctx: Context) -> str:
        """Idempotent: append "<task id> <pid>" to ``log``, wait for ``gate``, finish."""
        with Path(log).open("a") as out:
            out.write(f"{ctx.task_id} {os.getpid()}\n")
        while not Path(gate).exists():
            await asyncio.sleep(0.02)
        return f"ran in {os.getpid()}"

    @mcp.tool(task=FAST)
    async def charge(log: str, gate: str) -> str:
        """Not idempotent: a run leaves a line in ``log``; waits for ``gate``."""
        with Path(log).open("a") as out:
            out.write("charged\n")
        while not Path(gate).exists():
            await asyncio.sleep(0.02)
        return "charged"

    @mcp.tool(task=FAST, annotations=IDEMPOTENT)
    async def ask_then_wait(gate: str, ctx: Context) -> str:
        """Idempotent: ask (guard pattern), then wait for ``gate``."""
        answers = ctx.input_responses
        if not answers:
            form = mcp_types.ElicitRequestFormParams(
                mode="form",
                message="Proceed?",
                requested_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}},
            )
            return mcp_types.InputRequiredResult(
                input_requests={"ok": mcp_types.ElicitRequest(params=form)}
            )
        while not Path(gate).exists():
            await asyncio.sleep(0.02)
        return "proceeded"

    @mcp.tool(task=True)
    async def optional_greet(ctx: Context) -> Any:
        """Optional-mode, guard pattern: without consent FastMCP asks in SEP-2322 rounds."""
        answers = ctx.input_responses
        if not answers:
            form = mcp_types.ElicitRequestFormParams(
                mode="form",
                message="Your name?",
                requested_schema={"type": "object", "properties": {"name": {"type": "string"}}},
            )
            return mcp_types.InputRequiredResult(
                input_requests={"name": mcp_types.ElicitRequest(params=form)},
                request_state="round-1",
            )
        content = getattr(answers["name"], "content", None) or {}
        return f"Hi, {content.get('name')} ({ctx.request_state})"

    @mcp.tool(task=True)
    async def optional_double(x: int) -> int:
        """An optional-mode task tool: a task with consent, inline without."""
        return 2 * x

    @mcp.tool()
    async def shout(text: str) -> str:
        """A plain synchronous tool."""
        return text.upper()

    return mcp


def serve(mcp: FastMCP, port_file: Path, port: int = 0) -> None:
    """Serve ``mcp`` at /mcp on 127.0.0.1 (``port``, 0: a free one), announced in ``port_file``."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    app = mcp.http_app(path="/mcp", json_response=True, stateless_http=True)

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            # Written once, atomically (rename), after uvicorn is serving.
            scratch = port_file.with_suffix(".tmp")
            scratch.write_text(str(sock.getsockname()[1]))
            scratch.replace(port_file)

    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
    asyncio.run(Server(config).serve(sockets=[sock]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("port_file", type=Path)
    parser.add_argument("--auth", action="store_true")
    parser.add_argument("--lease-s", type=float, default=15.0)
    parser.add_argument("--ttl-s", type=float, default=None)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--backend", choices=("longcall", "fastmcp-tasks"), default="longcall")
    args = parser.parse_args()
    mcp = build(
        args.store, auth=args.auth, lease_s=args.lease_s, ttl_s=args.ttl_s, backend=args.backend
    )
    serve(mcp, args.port_file, args.port)


if __name__ == "__main__":
    main()
