"""The reference server's example tools (used by the demo, executor tests and the simulator).

Owns: ``sleep_report``, ``crawl``, ``approve``, ``fail`` and ``echo`` and the factory
that serves them. Must not: hold protocol logic; each tool is an ordinary async function.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from longcall.server.app import LongcallServer
from longcall.server.auth import Authenticator, token_principal
from longcall.server.errors import ToolError, ToolProtocolError
from longcall.server.options import ServerOptions
from longcall.server.store import TaskStore
from longcall.server.tools import TaskContext

ROWS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"rows": {"type": "array", "items": {"type": "object"}}},
    "required": ["rows"],
}
CRAWL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "items": {"type": "array", "items": {"type": "string"}},
        "pages": {"type": "integer"},
    },
    "required": ["items", "pages"],
}
DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"change": {"type": "string"}, "approved": {"type": "boolean"}},
    "required": ["change", "approved"],
}
APPROVAL_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {"approved": {"type": "boolean", "description": "Apply the change?"}},
    "required": ["approved"],
}
PROGRESS_STEPS_MAX = 20


def build_reference_server(
    *,
    store: TaskStore | str | None = None,
    options: ServerOptions | None = None,
    authenticator: Authenticator = token_principal,
    apify_time_scale: float = 1.0,
) -> LongcallServer:
    """A server with the five example tools registered, also served as AIP-151 operations
    under ``/v1`` and Apify-style at ``/apify/mcp`` (S8)."""
    from longcall.server.aip151 import mount_aip151
    from longcall.server.apify import mount_apify

    server = LongcallServer(store=store, options=options, authenticator=authenticator)
    register_reference_tools(server)
    mount_aip151(server)
    mount_apify(server, time_scale=apify_time_scale)
    return server


def register_reference_tools(server: LongcallServer) -> None:
    """Register the example tools on ``server``."""

    @server.tool(task="optional", poll_interval_ms=500, idempotent=True, output_schema=ROWS_SCHEMA)
    async def sleep_report(ctx: TaskContext, seconds: float, rows: int) -> dict[str, Any]:
        """Sleep ``seconds`` while reporting progress, then return ``rows`` report rows."""
        if seconds < 0 or rows < 0:
            raise ToolError("seconds and rows must not be negative")
        steps = max(1, min(PROGRESS_STEPS_MAX, int(seconds * 4)))
        for step in range(steps):
            await asyncio.sleep(seconds / steps)
            await ctx.report_progress(step + 1, steps, f"step {step + 1}/{steps}")
        return {"rows": [{"index": index, "value": index * index} for index in range(rows)]}

    @server.tool(task="required", poll_interval_ms=500, output_schema=CRAWL_SCHEMA)
    async def crawl(ctx: TaskContext, pages: int, items_per_page: int) -> dict[str, Any]:
        """Crawl ``pages`` pages of ``items_per_page`` items; zero pages is a zero-item success."""
        if pages < 0 or items_per_page < 0:
            raise ToolError("pages and items_per_page must not be negative")
        items: list[str] = []
        for page in range(pages):
            await asyncio.sleep(0)
            items.extend(f"page{page}-item{item}" for item in range(items_per_page))
            await ctx.report_progress(page + 1, pages, f"crawled page {page + 1}/{pages}")
        return {"items": items, "pages": pages}

    @server.tool(
        task="required", poll_interval_ms=500, idempotent=True, output_schema=DECISION_SCHEMA
    )
    async def approve(ctx: TaskContext, change: str) -> dict[str, Any]:
        """Ask a human to approve ``change`` and return the decision."""
        answer = await ctx.elicit(f"Approve this change? {change}", APPROVAL_FORM)
        content = answer.get("content") or {}
        approved = answer.get("action") == "accept" and bool(content.get("approved"))
        return {"change": change, "approved": approved}

    @server.tool(task="required", poll_interval_ms=500, idempotent=True)
    async def fail(kind: Literal["tool", "protocol"]) -> str:
        """End in a tool error (``isError``) or in a JSON-RPC error, as asked."""
        await asyncio.sleep(0)
        if kind == "tool":
            raise ToolError("fail(kind='tool'): the tool reported an error")
        raise ToolProtocolError(
            -32603, "fail(kind='protocol'): the tool raised a protocol error", {"kind": kind}
        )

    @server.tool(task="forbidden", idempotent=True)
    async def echo(text: str) -> str:
        """Answer ``text`` synchronously."""
        return text
