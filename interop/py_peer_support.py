"""What the Python interop peers share: serving an ASGI app on 127.0.0.1, bounded.

Owns: binding a free 127.0.0.1 port, printing one JSON line ``{"ready": true, "url": ...}``
once uvicorn serves, one JSON event line per ``emit`` (task executions, HTTP exchanges),
and the bounds that make a peer exit by itself: SIGTERM, its stdin closing
(``--exit-with-stdin``: the parent died) and ``--max-lifetime-s``.

Imports only the standard library, Starlette and uvicorn, which every peer venv has
(each peer runs in its own venv, built by ``make interop``). Must not: decide anything
about MCP; every wire behaviour is the peer's SDK's own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]

_OUT = threading.Lock()


def emit(event: dict[str, Any]) -> None:
    """One JSON line on stdout (the test reads them as they come)."""
    with _OUT:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def arguments(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The options every peer takes, plus the peer's own ones."""
    parser.add_argument("--stateless", action="store_true")
    parser.add_argument("--max-lifetime-s", type=float, default=600.0)
    parser.add_argument("--exit-with-stdin", action="store_true")
    return parser.parse_args()


def traced(app: Asgi) -> Asgi:
    """``app``, printing one ``http`` event per exchange: verb, path, JSON-RPC method,
    session sent and issued, status, content type (so a failing test shows the wire)."""

    async def wrapper(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
        body = bytearray()
        seen: dict[str, Any] = {}

        async def tapped_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
            return message

        async def tapped_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                answer = {k.decode().lower(): v.decode() for k, v in message.get("headers", [])}
                seen["status"] = message["status"]
                seen["contentType"] = answer.get("content-type", "").split(";")[0]
                seen["issued"] = answer.get("mcp-session-id")
                seen["location"] = answer.get("location")
                emit(
                    {
                        "event": "http",
                        "verb": scope["method"],
                        "path": scope["path"],
                        "rpc": _rpc_method(bytes(body)),
                        "accept": headers.get("accept"),
                        "session": headers.get("mcp-session-id"),
                        **seen,
                    }
                )
            await send(message)

        await app(scope, tapped_receive, tapped_send)

    return wrapper


def _rpc_method(body: bytes) -> str | None:
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if not isinstance(message, dict):
        return None
    if "method" in message:
        return str(message["method"])
    return "response" if "id" in message else None


def serve(app: Asgi, options: argparse.Namespace, path: str) -> None:
    """Serve ``app`` on a free 127.0.0.1 port until stopped; ``path`` names the MCP
    endpoint in the ready line."""
    _bound(options)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            emit({"ready": True, "url": f"http://127.0.0.1:{port}{path}", "pid": os.getpid()})

    config = uvicorn.Config(traced(app), log_level="warning", lifespan="on")
    asyncio.run(Server(config).serve(sockets=[sock]))


def _bound(options: argparse.Namespace) -> None:
    """Exit by ourselves after the lifetime, or when our parent's pipe closes."""
    timer = threading.Timer(options.max_lifetime_s, lambda: os._exit(0))
    timer.daemon = True
    timer.start()
    if options.exit_with_stdin:

        def watch_stdin() -> None:
            while sys.stdin.buffer.read(1024):
                pass
            os._exit(0)

        threading.Thread(target=watch_stdin, daemon=True).start()
