"""A synchronous ``tools/call`` answered as JSON, or streamed with its progress (S1, X11).

Owns: running a tool inline for both protocol versions; when the request names a
``progressToken`` and accepts ``text/event-stream``, the answer is an SSE stream of
``notifications/progress`` followed by the response, otherwise one JSON response (the
tool's progress is then dropped). Must not: create tasks or touch the store.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from longcall.server.errors import JsonRpcError
from longcall.server.tasks import Progress, SyncContext
from longcall.server.wire import (
    Reply,
    RpcRequest,
    Streamed,
    error_response,
    notification,
    request_meta,
    response,
)

ToolRun = Callable[[SyncContext], Awaitable[dict[str, Any]]]
PROGRESS_BACKLOG_MAX = 256
"""Progress notes queued for a slow reader; past it the oldest unsent one is dropped."""


def progress_token(request: RpcRequest) -> str | int | None:
    """The request's ``_meta.progressToken`` (a string or an integer), if any."""
    token = request_meta(request.params).get("progressToken")
    if isinstance(token, bool) or not isinstance(token, str | int):
        return None
    return token


async def answer(
    request: RpcRequest,
    context: SyncContext,
    run: ToolRun,
    finish: Callable[[dict[str, Any]], dict[str, Any]],
) -> Reply | Streamed:
    """Run the tool; JSON, or a progress stream when the client asked for one."""
    token = progress_token(request)
    if token is None or not request.accepts_event_stream:
        return Reply(result=finish(await run(context)))
    return Streamed(messages=_progress_stream(request, context, run, finish, token))


async def _progress_stream(
    request: RpcRequest,
    context: SyncContext,
    run: ToolRun,
    finish: Callable[[dict[str, Any]], dict[str, Any]],
    token: str | int,
) -> AsyncIterator[dict[str, Any]]:
    notes: asyncio.Queue[Progress] = asyncio.Queue(maxsize=PROGRESS_BACKLOG_MAX)

    def sink(note: Progress) -> None:
        if notes.full():
            notes.get_nowait()
        notes.put_nowait(note)

    context.progress_sink = sink
    work = asyncio.ensure_future(run(context))
    try:
        while not work.done() or not notes.empty():
            waiter = asyncio.ensure_future(notes.get())
            await asyncio.wait({work, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if waiter.done():
                yield notification("notifications/progress", _params(token, waiter.result()))
            else:
                waiter.cancel()
        try:
            yield response(request.id, finish(work.result()))
        except JsonRpcError as exc:
            yield error_response(request.id, exc.to_wire())
    finally:
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await work


def _params(token: str | int, note: Progress) -> dict[str, Any]:
    params: dict[str, Any] = {"progressToken": token, "progress": note.progress}
    if note.total is not None:
        params["total"] = note.total
    if note.message is not None:
        params["message"] = note.message
    return params
