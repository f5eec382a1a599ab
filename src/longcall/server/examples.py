"""The reference server's example tools (used by the demo, executor tests and the simulator).

Owns: ``sleep_report``, ``crawl``, ``approve``, ``fail`` and ``echo`` and the factory
that serves them. Must not: hold protocol logic; each tool is an ordinary async function.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from pydantic import Field

from longcall.server.app import LongcallServer
from longcall.server.auth import Authenticator, token_principal
from longcall.server.errors import ToolError, ToolProtocolError
from longcall.server.options import ServerOptions
from longcall.server.store import TaskStore
from longcall.server.tools import TaskContext
from longcall.server.webhooks.model import WebhookOptions

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
SLEEP_SECONDS_MAX = 3_600.0
ROWS_MAX = 10_000
CRAWL_PAGES_MAX = 1_000
CRAWL_ITEMS_PER_PAGE_MAX = 100
"""Bounds of the example tools: arguments are untrusted input, and every run must end
with a result the server keeps (at most 100,000 short items)."""


def build_reference_server(
    *,
    store: TaskStore | str | None = None,
    options: ServerOptions | None = None,
    authenticator: Authenticator = token_principal,
    apify_time_scale: float = 1.0,
    webhooks: WebhookOptions | None = None,
) -> LongcallServer:
    """A server with the five example tools registered, also served as AIP-151 operations
    under ``/v1`` and Apify-style at ``/apify/mcp`` (S8)."""
    from longcall.server.aip151 import mount_aip151
    from longcall.server.apify import mount_apify

    server = LongcallServer(
        store=store, options=options, authenticator=authenticator, webhooks=webhooks
    )
    register_reference_tools(server)
    mount_aip151(server)
    mount_apify(server, time_scale=apify_time_scale)
    return server


def register_reference_tools(server: LongcallServer) -> None:
    """Register the example tools on ``server``."""

    @server.tool(task="optional", poll_interval_ms=500, idempotent=True, output_schema=ROWS_SCHEMA)
    async def sleep_report(
        ctx: TaskContext,
        seconds: Annotated[float, Field(ge=0, le=SLEEP_SECONDS_MAX)],
        rows: Annotated[int, Field(ge=0, le=ROWS_MAX)],
    ) -> dict[str, Any]:
        """Sleep ``seconds`` while reporting progress, then return ``rows`` report rows."""
        steps = max(1, min(PROGRESS_STEPS_MAX, int(seconds * 4)))
        for step in range(steps):
            await asyncio.sleep(seconds / steps)
            await ctx.report_progress(step + 1, steps, f"step {step + 1}/{steps}")
        return {"rows": [{"index": index, "value": index * index} for index in range(rows)]}

    @server.tool(task="required", poll_interval_ms=500, output_schema=CRAWL_SCHEMA)
    async def crawl(
        ctx: TaskContext,
        pages: Annotated[int, Field(ge=0, le=CRAWL_PAGES_MAX)],
        items_per_page: Annotated[int, Field(ge=0, le=CRAWL_ITEMS_PER_PAGE_MAX)],
    ) -> dict[str, Any]:
        """Crawl ``pages`` pages of ``items_per_page`` items; zero pages is a zero-item success."""
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
