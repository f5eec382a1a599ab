"""MCP over stdio for the gateway: how Claude Desktop, Cursor and most hosts start a
local server (G1).

Owns: reading newline-delimited JSON-RPC from a stream and answering on another, each
request in a task of its own (a long call never holds up a status call), writes
serialised, progress notifications before the response when the request named a
``progressToken``; the same protocol code as the HTTP endpoint (both task versions),
with one principal for the whole process (the person who started it). Must not: hold
protocol rules (``longcall.server`` does) or write anything but JSON-RPC to the output
(logs go to stderr).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import threading
from collections.abc import Mapping
from typing import Any, BinaryIO

from longcall.server import LongcallServer, modern
from longcall.server.errors import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR, JsonRpcError
from longcall.server.model import Principal
from longcall.server.wire import RpcRequest, Streamed, error_response, response

log = logging.getLogger("longcall.gateway.stdio")

STDIO_PRINCIPAL = Principal(subject="stdio:local")
"""Everything on one stdio connection is the person who started the process."""
LINE_BYTES_MAX = 4 * 1024 * 1024


async def next_line(reader: asyncio.StreamReader) -> bytes | None:
    """The next line (``b""`` at the end), or ``None`` for a line past the reader's limit,
    skipped whole so that the line after it is read as it was sent."""
    oversized = False
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            return None if oversized else exc.partial
        except asyncio.LimitOverrunError as exc:
            # Unlike readline, drop only what was looked at, then go on to the newline.
            oversized = True
            await reader.read(max(1, exc.consumed))
            continue
        return None if oversized else line


class StdioSession:
    """One stdio connection: requests in, answers out."""

    def __init__(
        self,
        server: LongcallServer,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter | Any,
        *,
        principal: Principal = STDIO_PRINCIPAL,
    ) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.principal = principal
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._capabilities: Mapping[str, Any] | None = None

    async def run(self) -> None:
        """Answer until the input ends (the host closed it); open calls go on in the
        ledger and resume at the next start."""
        await self.server.manager.start()
        try:
            while True:
                line = await next_line(self.reader)
                if line is None:
                    too_long = {
                        "code": INVALID_REQUEST,
                        "message": "Invalid Request: line too long",
                    }
                    self._spawn(self._send(error_response(None, too_long)))
                    continue
                if not line:
                    return
                if line.strip():
                    self._dispatch(line)
        finally:
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            await self.server.manager.stop()

    def _dispatch(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            self._spawn(
                self._send(error_response(None, {"code": PARSE_ERROR, "message": "Parse error"}))
            )
            return
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            invalid = {"code": INVALID_REQUEST, "message": "Invalid Request"}
            self._spawn(self._send(error_response(None, invalid)))
            return
        if "method" not in message:
            self._spawn(self._client_response(message))
        elif "id" in message:
            self._spawn(self._answer(message))

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _client_response(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(JsonRpcError):
            await self.server.legacy.answer_side_channel(self.principal, message)

    async def _answer(self, message: dict[str, Any]) -> None:
        request_id = message.get("id")
        params = message.get("params") or {}
        try:
            if not isinstance(params, dict):
                raise JsonRpcError(-32602, "params must be an object")
            if message.get("method") == "initialize":
                capabilities = params.get("capabilities")
                self._capabilities = capabilities if isinstance(capabilities, dict) else {}
            rpc = RpcRequest(
                id=request_id,
                method=str(message.get("method")),
                params=params,
                headers={},
                principal=self.principal,
                accepts_event_stream=True,  # progress notifications may go before the answer
                session_capabilities=self._capabilities,
            )
            protocol = self.server.modern if modern.is_modern(message, {}) else self.server.legacy
            reply = await protocol.handle(rpc)
        except JsonRpcError as exc:
            await self._send(error_response(request_id, exc.to_wire()))
            return
        except Exception:
            log.exception("internal error answering %s", message.get("method"))
            internal = {"code": INTERNAL_ERROR, "message": "Internal error"}
            await self._send(error_response(request_id, internal))
            return
        if isinstance(reply, Streamed):
            async for item in reply.messages:
                await self._send(item)
        else:
            await self._send(response(request_id, reply.result))

    async def _send(self, message: Mapping[str, Any]) -> None:
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        async with self._lock:
            self.writer.write(data)
            await self.writer.drain()


class _BlockingWriter:
    """Writes to a binary file at once (stdout may be a pipe, a file or a terminal)."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream

    def write(self, data: bytes) -> None:
        self.stream.write(data)
        self.stream.flush()

    async def drain(self) -> None:
        return None


def _feed(reader: asyncio.StreamReader, stream: BinaryIO, loop: asyncio.AbstractEventLoop) -> None:
    """On a thread: stdin's lines into ``reader`` (a pipe, a file or a terminal alike)."""
    try:
        for line in iter(stream.readline, b""):
            loop.call_soon_threadsafe(reader.feed_data, line)
    finally:
        loop.call_soon_threadsafe(reader.feed_eof)


async def serve_stdio(server: LongcallServer) -> None:
    """Serve MCP on this process's stdin and stdout until stdin ends."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=LINE_BYTES_MAX)
    threading.Thread(
        target=_feed, args=(reader, sys.stdin.buffer, loop), name="stdin", daemon=True
    ).start()
    await StdioSession(server, reader, _BlockingWriter(sys.stdout.buffer)).run()
