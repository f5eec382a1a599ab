"""X1: negotiate per server, before anything is submitted, which adapter speaks to it.

Owns: :func:`connect` — 2026-07-28 ``server/discover`` with the tasks extension → P1;
else ``initialize`` (2025-11-25) with ``capabilities.tasks.requests.tools.call`` → P2;
else the synchronous adapter (P5), which refuses a call declared long
(:class:`TaskSupportMissing`) unless the tool declares a synchronous limit. Must not:
assume ``tasks/*`` exists where it was not declared, or submit anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from longcall.adapters.base import Adapter, ProgressSink
from longcall.adapters.mcp_common import (
    CLIENT_INFO,
    DEFAULT_REQUEST_TIMEOUT_S,
    LEGACY,
    MODERN,
    TASKS_EXTENSION,
    Dialect,
    ModernDialect,
    RpcAnswer,
    RpcSession,
)
from longcall.adapters.mcp_tasks_2025_11_25 import McpTasks20251125Adapter
from longcall.adapters.mcp_tasks_2026_07_28 import McpTasks20260728Adapter
from longcall.adapters.sync import SyncAdapter
from longcall.errors import NegotiationFailed

Preference = str
"""``"2026-07-28"``, ``"2025-11-25"``, ``"sync"`` or a bound protocol name such as
``"2025-11-25/sync"`` (a record's ``protocol``: P6 keeps serving its operations)."""


async def discover(session: RpcSession) -> Mapping[str, Any] | None:
    """The 2026-07-28 ``server/discover`` result, or None when the server does not speak it."""
    dialect = ModernDialect()
    params = {"_meta": dialect.meta("server/discover", consent=True)}
    answer = await session.request(
        "server/discover", params, headers=dialect.headers("server/discover", None)
    )
    if isinstance(answer, RpcAnswer) and answer.result is not None:
        versions = answer.result.get("supportedVersions")
        if isinstance(versions, list) and MODERN in versions:
            return answer.result
    return None


async def initialize(session: RpcSession) -> Mapping[str, Any] | None:
    """The 2025-11-25 ``initialize`` result (and ``notifications/initialized``), or None."""
    params = {
        "protocolVersion": LEGACY,
        "capabilities": {},
        "clientInfo": dict(CLIENT_INFO),
    }
    answer = await session.request("initialize", params, headers={"mcp-protocol-version": LEGACY})
    if not isinstance(answer, RpcAnswer) or answer.result is None:
        return None
    await session.post_message(
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        headers={"mcp-protocol-version": LEGACY},
    )
    return answer.result


def offers_modern_tasks(discovered: Mapping[str, Any]) -> bool:
    capabilities = discovered.get("capabilities")
    extensions = capabilities.get("extensions") if isinstance(capabilities, Mapping) else None
    return isinstance(extensions, Mapping) and isinstance(extensions.get(TASKS_EXTENSION), Mapping)


def offers_legacy_tasks(initialized: Mapping[str, Any]) -> bool:
    capabilities = initialized.get("capabilities")
    tasks = capabilities.get("tasks") if isinstance(capabilities, Mapping) else None
    requests = tasks.get("requests") if isinstance(tasks, Mapping) else None
    tools = requests.get("tools") if isinstance(requests, Mapping) else None
    return isinstance(tools, Mapping) and "call" in tools


async def connect(
    url: str,
    *,
    token: str | None = None,
    prefer: Preference | None = None,
    long_call: bool = False,
    progress: ProgressSink | None = None,
    timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    http: httpx.AsyncClient | None = None,
) -> Adapter:
    """Negotiate with the server at ``url`` and return the adapter to use (X1).

    ``prefer`` tries that protocol first (and ``"sync"`` skips task negotiation);
    ``long_call`` makes the synchronous fallback refuse at ``bind`` rather than run a
    long call under a request timeout. ``http`` lends a client (it is then not closed).
    """
    session = RpcSession(url, token=token, timeout_s=timeout_s, http=http)
    if prefer is not None and (prefer == "sync" or prefer.endswith("/sync")):
        version = prefer.partition("/")[0]
        prefer = "sync"
        if version == LEGACY:
            return await _legacy_sync(session, long_call, progress, timeout_s)
    try:
        return await _negotiate(session, prefer, long_call, progress, timeout_s)
    except BaseException:
        await session.aclose()
        raise


async def _legacy_sync(
    session: RpcSession, long_call: bool, progress: ProgressSink | None, timeout_s: float
) -> Adapter:
    try:
        if await initialize(session) is None:
            raise NegotiationFailed(f"{session.url} does not answer initialize ({LEGACY})")
    except BaseException:
        await session.aclose()
        raise
    return SyncAdapter(
        session, dialect=Dialect(), timeout_s=timeout_s, long_call=long_call, progress=progress
    )


async def _negotiate(
    session: RpcSession,
    prefer: Preference | None,
    long_call: bool,
    progress: ProgressSink | None,
    timeout_s: float,
) -> Adapter:
    discovered: Mapping[str, Any] | None = None
    initialized: Mapping[str, Any] | None = None
    if prefer != "2025-11-25":
        discovered = await discover(session)
        if discovered is not None and prefer != "sync" and offers_modern_tasks(discovered):
            return McpTasks20260728Adapter(session, discovered=discovered, progress=progress)
    if discovered is None or prefer == "2025-11-25":
        initialized = await initialize(session)
        if initialized is not None and prefer != "sync" and offers_legacy_tasks(initialized):
            return McpTasks20251125Adapter(session, initialized=initialized, progress=progress)
        if initialized is None and prefer == "2025-11-25":
            discovered = await discover(session)
            if discovered is not None and offers_modern_tasks(discovered):
                return McpTasks20260728Adapter(session, discovered=discovered, progress=progress)
    if discovered is None and initialized is None:
        raise NegotiationFailed(
            f"{session.url} answered neither server/discover ({MODERN}) nor initialize ({LEGACY})"
        )
    dialect: Dialect = ModernDialect() if discovered is not None else Dialect()
    return SyncAdapter(
        session, dialect=dialect, timeout_s=timeout_s, long_call=long_call, progress=progress
    )


__all__ = ["NegotiationFailed", "Preference", "connect", "discover", "initialize"]
