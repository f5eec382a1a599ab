"""The MCP adapters the runtime uses: a pure mapping per version run over HTTP.

Owns: :func:`connect` (negotiate over HTTP, then build the adapter, X1), the three
adapter classes (one per mapping: P1, P2, P5), progress surfaced from a request's
event stream as it arrives (X11), and push (X3, S7): one long-lived stream per
adapter — 2026-07-28 ``subscriptions/listen`` for exactly the tasks we hold, or the
2025-11-25 standalone GET stream — kept open with backoff and an idle-read bound, whose
notifications only report "this task changed" (poll for truth, listen for speed).

Must not: read a reply or decide an event (the mappings in this package do).
"""

from __future__ import annotations

import json
import random
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

import httpx

from longcall.adapters.base import ProgressSink, PushSink
from longcall.adapters.exchange import (
    DEFAULT_TIMEOUT_S,
    Exchange,
    HttpRequest,
    Reply,
    SseEvent,
    TransportFailure,
)
from longcall.adapters.http import EventObserver, HttpDriver
from longcall.adapters.mcp.common import progress_observer
from longcall.adapters.mcp.legacy import LegacyMapping
from longcall.adapters.mcp.modern import ModernMapping
from longcall.adapters.mcp.negotiate import (
    Negotiated,
    Preference,
    initialize,
    negotiate,
    resumed,
    session_of,
)
from longcall.adapters.mcp.rpc import ACCEPT, SESSION_HEADER, RpcChannel
from longcall.adapters.mcp.sync import SyncMapping
from longcall.adapters.shell import MappedAdapter
from longcall.core import OperationRecord
from longcall.core.retry import RetryPolicy, backoff_delay_s, is_retryable

PUSH_RETRY = RetryPolicy(base_s=0.5, cap_s=30.0)
"""Reconnect backoff of a broken push stream (X3, X9): full jitter, capped."""
PUSH_IDLE_S = 300.0
"""A push stream silent this long is taken for dead and reopened (C4: no unbounded read)."""


SessionSink = Callable[[dict[str, Any] | None], None]
"""Told the session to keep for this server (None: forget it), so every process of the
caller resumes it: a stateful server binds its tasks to the session that made them."""


class McpAdapter(MappedAdapter):
    """An MCP mapping over HTTP, with progress from streams (X11) and, at a stateful
    server, its session kept for the caller's other processes and re-opened when the
    server ends it."""

    mapping: Negotiated
    on_session: SessionSink | None = None
    _session: dict[str, Any] | None = None

    async def _run(self, exchange: Exchange[Any], record: OperationRecord | None = None) -> Any:
        if self.channel.session_expired:
            # The server ended our session: open another (operations it bound to the
            # old one now answer "not found", which the core hands to an operator).
            await self.driver.run(initialize(self.channel))
        result = await super()._run(exchange, record)
        self._note_session()
        return result

    def _note_session(self) -> None:
        session = session_of(self.mapping)
        if session != self._session:
            self._session = session
            if self.on_session is not None:
                self.on_session(session)

    async def end_session(self) -> None:
        """End our session at the server (DELETE) and forget it (Streamable HTTP)."""
        request = self.channel.end_session()
        if request is None:
            return
        await self.driver.send(request)
        self.channel.session_id = None
        self._note_session()

    def observer(self, record: OperationRecord) -> EventObserver | None:
        observe: EventObserver | None = progress_observer(self.progress, record.call_node_id)
        return observe

    @property
    def channel(self) -> RpcChannel:
        return self.mapping.channel


class McpTasks20260728Adapter(McpAdapter):
    """P1 at one server; build it with :func:`connect`."""

    mapping: ModernMapping

    async def listen(self, operation_ids: Collection[str], on_change: PushSink) -> None:
        """``subscriptions/listen`` for exactly these task ids (the server acks the ids it
        accepts, sends a snapshot of each, then ``notifications/tasks``, and ends the
        stream once all are terminal); reopened with backoff when it breaks (X3, S7)."""
        task_ids = sorted(operation_ids)
        if not task_ids:
            return
        method, params = self.mapping.listen_request(task_ids)

        def request() -> HttpRequest:
            built, _ = self.channel.request(method, params)
            return built

        await keep_listening(self.driver, request, push_hook("notifications/tasks", on_change))


class McpTasks20251125Adapter(McpAdapter):
    """P2 at one server; build it with :func:`connect`."""

    mapping: LegacyMapping

    async def listen(self, operation_ids: Collection[str], on_change: PushSink) -> None:
        """The standalone GET stream: ``notifications/tasks/status`` for every task of our
        principal (ids we do not hold are the caller's to ignore); reopened with backoff
        when it breaks, given up on a 4xx such as 405 (no stream offered) (X3, S7)."""
        if not operation_ids:
            return

        def request() -> HttpRequest:
            headers = {"accept": "text/event-stream", **self.channel.dialect.headers("", None)}
            if self.channel.session_id is not None:
                headers[SESSION_HEADER] = self.channel.session_id
            return HttpRequest(method="GET", headers=headers)

        await keep_listening(
            self.driver, request, push_hook("notifications/tasks/status", on_change)
        )


class SyncAdapter(McpAdapter):
    """P5 at one server; build it with :func:`connect`."""

    mapping: SyncMapping


def adapter_for(
    mapping: Negotiated, driver: HttpDriver, *, progress: ProgressSink | None = None
) -> McpAdapter:
    """The adapter class that runs ``mapping``."""
    if isinstance(mapping, ModernMapping):
        return McpTasks20260728Adapter(mapping, driver, progress=progress)
    if isinstance(mapping, LegacyMapping):
        return McpTasks20251125Adapter(mapping, driver, progress=progress)
    return SyncAdapter(mapping, driver, progress=progress)


async def connect(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    auth: httpx.Auth | None = None,
    prefer: Preference | None = None,
    long_call: bool = False,
    progress: ProgressSink | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    http: httpx.AsyncClient | None = None,
    session: Mapping[str, Any] | None = None,
    on_session: SessionSink | None = None,
    login: Callable[[], Awaitable[httpx.Auth]] | None = None,
) -> McpAdapter:
    """Negotiate with the server at ``url`` and return the adapter to use (X1).

    ``headers`` go on every request (credentials, C1: never into the ledger or a
    message); ``http`` lends a client (it is then not closed). ``session`` is a session
    this caller kept at a stateful server: it is resumed instead of negotiating anew;
    ``on_session`` is told of every session to keep; ``login`` obtains credentials when
    the server asks for a bearer token and none are configured (OAuth). Raises
    :class:`~longcall.errors.NegotiationFailed`.
    """
    driver = HttpDriver(url, headers=headers, auth=auth, http=http, login=login)
    kept = (
        resumed(url, session, prefer=prefer, long_call=long_call, timeout_s=timeout_s)
        if session is not None
        else None
    )
    try:
        if kept is not None:
            mapping: Negotiated = kept
        else:
            mapping = await driver.run(
                negotiate(url, prefer=prefer, long_call=long_call, timeout_s=timeout_s)
            )
    except BaseException:
        await driver.aclose()
        raise
    adapter = adapter_for(mapping, driver, progress=progress)
    adapter._session = dict(session) if kept is not None and session is not None else None
    adapter.on_session = on_session
    adapter._note_session()
    return adapter


# --- push (X3, S7) ---------------------------------------------------------------------------


def push_hook(method: str, on_change: PushSink) -> Callable[[SseEvent], None]:
    """Report each ``method`` notification as (task id, wire status); never reads more
    into it than "this task changed" (X3)."""

    def hook(event: SseEvent) -> None:
        try:
            message = json.loads(event.data)
        except ValueError:
            return
        if not isinstance(message, Mapping) or message.get("method") != method:
            return
        params = message.get("params")
        if not isinstance(params, Mapping):
            return
        task_id, status = params.get("taskId"), params.get("status")
        if isinstance(task_id, str) and task_id:
            on_change(task_id, status if isinstance(status, str) else None)

    return hook


async def keep_listening(
    driver: HttpDriver,
    request: Callable[[], HttpRequest],
    hook: Callable[[SseEvent], None],
    *,
    retry: RetryPolicy = PUSH_RETRY,
    jitter: Callable[[], float] = random.random,
    sleep: Callable[[float], Awaitable[None]] | None = None,
) -> None:
    """Hold a push stream open, reopening it with backoff whenever it breaks or goes
    silent (X3). Returns when the server ends it gracefully or refuses it for good (a
    4xx, a JSON answer): from then on polling alone carries the operations, as it
    always could."""
    import anyio

    pause = sleep or anyio.sleep
    attempt = 0
    while True:
        opened: list[bool] = []

        def observe(event: SseEvent, opened: list[bool] = opened) -> None:
            opened.append(True)
            hook(event)

        reply = await driver.listen(request(), on_event=observe, idle_s=PUSH_IDLE_S)
        if not _should_reopen(reply):
            return
        attempt = 1 if opened else attempt + 1
        await pause(backoff_delay_s(retry, attempt, jitter()))


def _should_reopen(reply: Reply) -> bool:
    """A broken or silent stream is reopened; one the server ended with its answer, a
    JSON answer instead of a stream, or a refusal (405: no stream offered) is not."""
    if isinstance(reply, TransportFailure):
        return is_retryable(reply.kind)
    return reply.is_event_stream and not reply.events


__all__ = [
    "ACCEPT",
    "McpAdapter",
    "McpTasks20251125Adapter",
    "McpTasks20260728Adapter",
    "SyncAdapter",
    "adapter_for",
    "connect",
    "keep_listening",
    "push_hook",
]
