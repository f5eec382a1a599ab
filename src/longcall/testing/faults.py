"""An ASGI layer that loses the HTTP response of one call's task creation (SPEC F1).

Owns: :class:`LoseCreateResponse`, put in front of a server: the create of the one call
it names — by tool and arguments, which is that call's request — reaches the server and
is carried out in full (the task exists), but its response never reaches the client:
the connection breaks after the status line. The client then meets the fault the
protocol is hardest on ("created, response lost", X2) for exactly that call, whatever
order the creates arrive in.

Must not: touch any other request, or lose anything twice.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

BODY_BYTES_MAX = 4 * 1024 * 1024
"""Bodies are read whole to see which call they create; larger ones pass untouched."""


class LoseCreateResponse:
    """Loses the response of the first ``tools/call`` of ``tool`` with ``arguments``."""

    def __init__(self, inner: App, *, tool: str, arguments: Mapping[str, Any]) -> None:
        self.inner = inner
        self.tool = tool
        self.arguments = dict(arguments)
        self.lost = 0
        """How many responses this layer lost (0 or 1)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.lost or scope["type"] != "http" or scope["method"] != "POST":
            await self.inner(scope, receive, send)
            return
        body, more = await _read_body(receive)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": more}

        if more or not self._is_the_create(body):
            await self.inner(scope, replay, send)
            return
        self.lost += 1
        held: list[Message] = []

        async def hold(message: Message) -> None:
            held.append(message)

        # The server does all of its work (the task is created durably) ...
        await self.inner(scope, replay, hold)
        status = next((m["status"] for m in held if m["type"] == "http.response.start"), 200)
        # ... and the client gets a status line promising a body that never comes.
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"1024")],
            }
        )
        raise ConnectionAbortedError("create response lost on purpose (fault injection)")

    def _is_the_create(self, body: bytes) -> bool:
        try:
            message = json.loads(body)
        except ValueError:
            return False
        if not isinstance(message, dict) or message.get("method") != "tools/call":
            return False
        params = message.get("params")
        return (
            isinstance(params, dict)
            and params.get("name") == self.tool
            and params.get("arguments") == self.arguments
        )


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    """The request body (up to the bound) and whether more of it is left unread."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        more = bool(message.get("more_body"))
        if not more or len(body) > BODY_BYTES_MAX:
            return body, more
