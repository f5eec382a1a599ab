"""A peer MCP server built on fastmcp 4.2 (its own venv: ``interop/py-fastmcp4/.venv``,
built by ``make interop``; fastmcp 4.2 cannot share the dev venv, whose
``fastmcp-tasks`` 4.1 pins ``fastmcp-slim`` 4.1), on 127.0.0.1, plain tools only:
``fastmcp-tasks``, the package that gives fastmcp tools tasks, exists only for 4.1.

    python peer.py [--stateless] [--exit-with-stdin] [--max-lifetime-s S]

Tools ``shout`` and ``tool_error`` on ``http_app(path="/mcp")``, stateful by default.
Prints ``{"ready": true, "url": ...}`` once serving, then one JSON line per execution
(``started``, with the call's ``tag``) and one ``http`` line per exchange. Every wire
behaviour is fastmcp's own.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fastmcp import FastMCP
from fastmcp.exceptions import ToolError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from py_peer_support import arguments, emit, serve

mcp = FastMCP("longcall-fastmcp42-peer")


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


def main() -> None:
    options = arguments(argparse.ArgumentParser())
    serve(mcp.http_app(path="/mcp", stateless_http=options.stateless), options, "/mcp")


if __name__ == "__main__":
    main()
