"""A fastmcp + fastmcp-tasks server (the interop peer), run as a subprocess:
``python fastmcp_peer.py <port-file>``. It binds a free 127.0.0.1 port, writes the port
to the file once listening, and serves MCP at /mcp until killed."""

from __future__ import annotations

import asyncio
import socket
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import mcp_types
import uvicorn
from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension
from mcp.shared.exceptions import MCPError

FAST = TaskConfig(mode="required", poll_interval=timedelta(milliseconds=100))

mcp = FastMCP("longcall-peer")
mcp.add_extension(TasksExtension(url="memory://"))


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
    """Ask for a name (guard pattern), then greet."""
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
            input_requests={"name": mcp_types.ElicitRequest(params=form)}
        )
    answer = answers["name"]
    content = getattr(answer, "content", None) or {}
    return f"Hello, {content.get('name')}!"


@mcp.tool(task=FAST)
async def linger(seconds: float) -> str:
    """Run long enough to be cancelled."""
    await asyncio.sleep(seconds)
    return "done"


@mcp.tool()
async def shout(text: str) -> str:
    """A plain synchronous tool."""
    return text.upper()


def main() -> None:
    port_file = Path(sys.argv[1])
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    app = mcp.http_app(path="/mcp")

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            # Written once, atomically (rename), after uvicorn is serving.
            scratch = port_file.with_suffix(".tmp")
            scratch.write_text(str(sock.getsockname()[1]))
            scratch.replace(port_file)

    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    asyncio.run(Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
