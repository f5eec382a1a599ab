"""The Apify-style adapter the runtime uses: :class:`ApifyMapping` run over HTTP.

Owns: :func:`connect` (the driver at the MCP endpoint with the caller's headers and
bounds, ``initialize``, the wall clock given to the mapping) and :class:`ApifyAdapter`,
the thin I/O shell. Must not: read a reply or decide an event
(:mod:`longcall.adapters.apify.mapping` does), or hold a credential anywhere but the
driver's headers.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import httpx

from longcall.adapters.apify.mapping import (
    HELPERS,
    PAGE_LIMIT_DEFAULT,
    WAIT_SECS_DEFAULT,
    ApifyMapping,
    Clock,
)
from longcall.adapters.base import ProgressSink
from longcall.adapters.exchange import LINE_BYTES_MAX, RESPONSE_BYTES_MAX
from longcall.adapters.http import HttpDriver
from longcall.adapters.mcp.rpc import RpcReply
from longcall.adapters.shell import MappedAdapter

RUN_HELPERS = frozenset({*HELPERS, "get-key-value-store-record"})
"""Tools about runs and their storages, not runs themselves: the adapter calls them to
poll, read and abort a run, so they are not listed as tools an operation can call."""


class ApifyAdapter(MappedAdapter):
    """P4 at one Apify-style MCP endpoint (e.g. ``http://host/apify/mcp``); build it with
    :func:`connect`."""

    mapping: ApifyMapping

    async def list_tools(self) -> list[dict[str, Any]]:
        """The server's Actor tools (each call starts a run), without the run helpers."""
        return [tool for tool in await super().list_tools() if tool.get("name") not in RUN_HELPERS]

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> RpcReply:
        """Call any tool of the server and return its answer as read (a helper for
        inspecting storages; the operation's own calls go through the mapping)."""
        answer: RpcReply = await self.driver.run(self.mapping.call_tool(name, arguments))
        return answer


async def connect(
    url: str,
    headers: Mapping[str, str] | None = None,
    http: httpx.AsyncClient | None = None,
    *,
    auth: httpx.Auth | None = None,
    wait_secs: int = WAIT_SECS_DEFAULT,
    start_wait_secs: int | None = None,
    page_limit: int = PAGE_LIMIT_DEFAULT,
    abort_gracefully: bool = False,
    clock: Clock = time.time,
    response_bytes_max: int = RESPONSE_BYTES_MAX,
    line_bytes_max: int = LINE_BYTES_MAX,
    progress: ProgressSink | None = None,
) -> ApifyAdapter:
    """``initialize`` the Apify-style server at ``url`` and return its adapter.

    ``headers`` go on every request (credentials, C1: never into the ledger or a
    message); ``http`` lends a client (it is then not closed). Raises
    :class:`~longcall.errors.AdapterError` for bad options or a server that does not
    take ``initialize``.
    """
    mapping = ApifyMapping(
        url,
        clock=clock,
        wait_secs=wait_secs,
        start_wait_secs=start_wait_secs,
        page_limit=page_limit,
        abort_gracefully=abort_gracefully,
    )
    driver = HttpDriver(
        url,
        headers=headers,
        auth=auth,
        http=http,
        response_bytes_max=response_bytes_max,
        line_bytes_max=line_bytes_max,
    )
    try:
        await driver.run(mapping.connect())
    except BaseException:
        await driver.aclose()
        raise
    return ApifyAdapter(mapping, driver, progress=progress)


__all__ = ["ApifyAdapter", "connect"]
