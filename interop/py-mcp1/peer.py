"""A peer MCP server built on the official Python SDK 1.x (``mcp`` 1.30, its own venv:
``interop/py-mcp1/.venv``, built by ``make interop``), on 127.0.0.1.

    python peer.py --kind tasks|fastmcp [--stateless] [--exit-with-stdin] [--max-lifetime-s S]

``--kind tasks``: the low-level ``Server`` with ``experimental.enable_tasks()`` (2025-11-25
experimental tasks), behind ``StreamableHTTPSessionManager`` mounted with Starlette
``Mount("/mcp")``, as the SDK's own task example serves it (``POST /mcp`` is answered with
a 307 to ``/mcp/``). Task tools ``slow_add``, ``tool_error``, ``linger``; the plain tool
``shout``.

``--kind fastmcp``: ``FastMCP`` with plain tools ``shout`` and ``tool_error`` on
``streamable_http_app()`` (route ``/mcp``), stateful by default, ``stateless_http`` with
``--stateless``.

Prints ``{"ready": true, "url": ...}`` once serving (the endpoint without the redirect:
``/mcp/`` for ``tasks``), then one JSON line per execution event (``started``,
``finished``, ``cancelled``) with the call's ``tag``, so a test counts executions where
the work runs, and one ``http`` line per exchange. Every wire behaviour is the SDK's own.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from mcp.server.experimental.task_context import ServerTaskContext
from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.routing import Mount

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from py_peer_support import arguments, emit, serve

CANCEL_CHECK_S = 0.05
"""How often ``linger`` looks whether its task was cancelled (the SDK's default
``tasks/cancel`` handler only marks the task in the store), and ``held`` for its file."""


def _schema(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"tag": {"type": "string"}, **properties}}


TOOLS = [
    types.Tool(
        name="slow_add",
        description="Add two numbers after a delay (a task that completes with a result).",
        inputSchema=_schema(a={"type": "number"}, b={"type": "number"}, ms={"type": "number"}),
        outputSchema={"type": "object", "properties": {"sum": {"type": "number"}}},
        execution=types.ToolExecution(taskSupport=types.TASK_REQUIRED),
    ),
    types.Tool(
        name="tool_error",
        description="End in a tool error (isError: true).",
        inputSchema=_schema(),
        execution=types.ToolExecution(taskSupport=types.TASK_REQUIRED),
    ),
    types.Tool(
        name="linger",
        description="Run until cancelled (or for ms milliseconds).",
        inputSchema=_schema(ms={"type": "number"}),
        execution=types.ToolExecution(taskSupport=types.TASK_REQUIRED),
    ),
    types.Tool(
        name="held",
        description="Run until the file named by `release` exists, then complete.",
        inputSchema=_schema(release={"type": "string"}),
        outputSchema={"type": "object", "properties": {"released": {"type": "boolean"}}},
        execution=types.ToolExecution(taskSupport=types.TASK_REQUIRED),
    ),
    types.Tool(
        name="shout",
        description="A plain synchronous tool.",
        inputSchema={"type": "object", "properties": {"text": {"type": "string"}}},
    ),
]


def task_server() -> Server:
    server: Server = Server("longcall-py-sdk1-task-peer")
    support = server.experimental.enable_tasks()

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return TOOLS

    async def slow_add(task: ServerTaskContext, args: dict[str, Any]) -> types.CallToolResult:
        await anyio.sleep(float(args.get("ms", 300)) / 1000)
        total = args["a"] + args["b"]
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=str(total))],
            structuredContent={"sum": total},
        )

    async def tool_error(task: ServerTaskContext, args: dict[str, Any]) -> types.CallToolResult:
        await anyio.sleep(0.05)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="bad input (tool-level)")], isError=True
        )

    async def linger(task: ServerTaskContext, args: dict[str, Any]) -> types.CallToolResult | None:
        with anyio.move_on_after(float(args.get("ms", 60000)) / 1000):
            while True:
                current = await support.store.get_task(task.task_id)
                if current is not None and current.status == "cancelled":
                    emit({"event": "cancelled", "taskId": task.task_id})
                    return None
                await anyio.sleep(CANCEL_CHECK_S)
        return types.CallToolResult(content=[types.TextContent(type="text", text="done")])

    async def held(task: ServerTaskContext, args: dict[str, Any]) -> types.CallToolResult:
        release = Path(args["release"])
        # The test, another process, says when by creating the file: nothing to await.
        while not release.exists():  # noqa: ASYNC110, ASYNC240
            await anyio.sleep(CANCEL_CHECK_S)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="released")],
            structuredContent={"released": True},
        )

    works = {"slow_add": slow_add, "tool_error": tool_error, "linger": linger, "held": held}

    @server.call_tool()
    async def call_tool(
        name: str, args: dict[str, Any]
    ) -> types.CallToolResult | types.CreateTaskResult:
        if name == "shout":
            emit({"event": "started", "tool": name, "tag": args.get("tag")})
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=str(args.get("text", "")).upper())]
            )
        ctx = server.request_context
        ctx.experimental.validate_task_mode(types.TASK_REQUIRED)
        assert ctx.experimental.task_metadata is not None
        work = works[name]

        async def run(task: ServerTaskContext) -> types.CallToolResult:
            emit({"event": "started", "tool": name, "taskId": task.task_id, "tag": args.get("tag")})
            result = await work(task, args)
            if result is None:  # cancelled: the store already holds the terminal status
                return types.CallToolResult(content=[])
            emit({"event": "finished", "tool": name, "taskId": task.task_id})
            return result

        return await ctx.experimental.run_task(run)

    return server


def task_app(stateless: bool) -> Starlette:
    manager = StreamableHTTPSessionManager(app=task_server(), stateless=stateless)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    # As the SDK's task example serves it: Mount answers POST /mcp with 307 -> /mcp/.
    return Starlette(routes=[Mount("/mcp", app=manager.handle_request)], lifespan=lifespan)


def fastmcp_app(stateless: bool) -> Starlette:
    mcp = FastMCP("longcall-py-sdk1-fastmcp-peer", stateless_http=stateless)

    @mcp.tool()
    async def shout(text: str, tag: str | None = None) -> str:
        """A plain synchronous tool."""
        emit({"event": "started", "tool": "shout", "tag": tag})
        return text.upper()

    @mcp.tool()
    async def tool_error(tag: str | None = None) -> str:
        """End in a tool error (isError: true)."""
        emit({"event": "started", "tool": "tool_error", "tag": tag})
        raise ToolError("bad input (tool-level)")

    return mcp.streamable_http_app()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=("tasks", "fastmcp"), default="tasks")
    options = arguments(parser)
    if options.kind == "tasks":
        serve(task_app(options.stateless), options, "/mcp/")
    else:
        serve(fastmcp_app(options.stateless), options, "/mcp")


if __name__ == "__main__":
    main()
