"""An upstream MCP server on the mcp 1.30 SDK (FastMCP), for tests/gateway/test_hosts.py:
a plain tool (no tasks) that finishes when the test releases it, and a count of runs.

    python mcp1_upstream.py PORT

Serves stateless Streamable HTTP with JSON answers at http://127.0.0.1:PORT/mcp (uvicorn
says "Uvicorn running on" on stderr once it listens). Bounded: it exits when its stdin
closes (the test ended) or after MAX_LIFETIME_S.
"""

from __future__ import annotations

import asyncio
import collections
import os
import sys
import threading

from mcp.server.fastmcp import FastMCP

MAX_LIFETIME_S = 300

port = int(sys.argv[1])
server = FastMCP(
    "mcp1-upstream", host="127.0.0.1", port=port, stateless_http=True, json_response=True
)
gates: dict[str, asyncio.Event] = collections.defaultdict(asyncio.Event)
runs: collections.Counter[str] = collections.Counter()


@server.tool()
async def plain_slow(key: str) -> str:
    """A plain long tool: done once `release` is called with the same key."""
    runs[key] += 1
    await gates[key].wait()
    return f"plain {key} done after {runs[key]} run(s)"


@server.tool()
async def release(key: str) -> int:
    """Let `plain_slow(key)` finish; returns how many times it ran."""
    gates[key].set()
    return runs[key]


def exit_with_stdin() -> None:
    sys.stdin.read()
    os._exit(0)


threading.Thread(target=exit_with_stdin, daemon=True).start()
threading.Timer(MAX_LIFETIME_S, lambda: os._exit(3)).start()
server.run(transport="streamable-http")
