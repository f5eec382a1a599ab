"""HTTP transport pieces under the front door: event streams and connection limits.

Owns: :class:`EventStream`, an SSE response that stops (and releases whatever its
generator holds) as soon as the client disconnects, even when it has nothing to send;
the uvicorn protocol with a deadline for a request's head (slow-loris) whose writes of
one turn of the event loop leave in one send; and the uvicorn configuration with the
connection limit. Must not: know JSON-RPC methods or tasks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import uvicorn
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from longcall.server.options import ServerOptions


class EventStream(Response):
    """``text/event-stream`` of JSON-RPC messages; it ends with the stream or the client.

    Starlette's streaming response learns of a disconnect only when a write fails, so a
    push stream with nothing to say would hold its listener (and its memory) forever
    after the client left; this one watches ``http.disconnect`` alongside the messages.
    """

    media_type = "text/event-stream"

    def __init__(self, messages: AsyncIterator[dict[str, Any]]) -> None:
        # No Response.__init__: it would declare a Content-Length for an empty body.
        self.status_code = 200
        self.background = None
        self.raw_headers = [
            (b"content-type", b"text/event-stream"),
            (b"cache-control", b"no-store"),
        ]
        self._messages = messages

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        async with anyio.create_task_group() as group:

            async def pump() -> None:
                try:
                    async for message in self._messages:
                        data = json.dumps(message, separators=(",", ":"))
                        frame = f"event: message\ndata: {data}\n\n".encode()
                        await send({"type": "http.response.body", "body": frame, "more_body": True})
                finally:
                    group.cancel_scope.cancel()

            async def watch() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                group.cancel_scope.cancel()

            group.start_soon(pump)
            group.start_soon(watch)
        aclose = getattr(self._messages, "aclose", None)
        if aclose is not None:
            await aclose()
        # After a disconnect uvicorn drops what is sent; the response still ends properly.
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class CorkedTransport:
    """A socket transport whose writes of one turn of the event loop leave in one send.

    uvicorn writes a response's head and its body separately, and a socket transport
    with nothing queued sends each at once: two system calls (and two wake-ups of the
    client) per answer, where one does. Writes here are joined and handed to the real
    transport at the end of the turn, before anything else can run; closing or handing
    the connection to another protocol sends what is held first, so nothing is lost or
    reordered. Everything else is the real transport's.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._held:
            self._loop.call_soon(self._send)
        self._held.append(bytes(data))

    def _send(self) -> None:
        if not self._held:
            return
        data = b"".join(self._held)
        self._held.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self._send()
        self._transport.close()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._send()
        self._transport.set_protocol(protocol)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class BoundedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline for each request's head (slow-loris).

    uvicorn times out idle keep-alive connections but not a client that opens a
    connection and sends its request line and headers a byte at a time: each such
    connection would stay open forever. Here a connection whose head is not complete
    within ``header_read_timeout_s`` of its first byte (or of the connection) is closed.
    """

    header_read_timeout_s = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # Flow control keeps the real transport (pausing reads, watching the write buffer).
        self.transport = CorkedTransport(transport, self.loop)  # type: ignore[assignment]
        self._head_timer: asyncio.TimerHandle | None = None
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.cycle is not None and not self.cycle.response_complete:
            self._disarm_head_timer()  # a request is being served: its head is complete
        else:
            self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_read_timeout_s, self._head_late)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self.cycle is None or self.cycle.response_complete:
            self.transport.close()


def uvicorn_config(app: ASGIApp, options: ServerOptions, **extra: Any) -> uvicorn.Config:
    """uvicorn settings with the server's limits: head deadline and connection cap."""
    protocol = type(
        "LongcallH11Protocol",
        (BoundedH11Protocol,),
        {"header_read_timeout_s": options.header_read_timeout_s},
    )
    return uvicorn.Config(
        app,
        http=protocol,
        limit_concurrency=options.max_connections,
        log_level="warning",
        **extra,
    )
