"""An ASGI layer that loses the HTTP response of one task creation (SPEC F1): the one
fault-injection seam for "created, response lost", outside anything a server's user
configures.

Owns: :class:`LoseCreateResponse`, put in front of a server: one create reaches the
server and is carried out in full (the task exists), but its response never reaches the
client: the connection breaks after the status line. The client then meets the fault
the protocol is hardest on (X2). Which create: the one of a named call (tool and
arguments, which is that call's request, whatever order the creates arrive in), or the
Nth create of any call. A create is an MCP ``tools/call`` or an AIP-151
``POST …/tools/TOOL:start``.

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
AIP151_START_SUFFIX = ":start"


class LoseCreateResponse:
    """Loses the response of the first create of ``tool`` with ``arguments``, or, without
    them, of the ``nth`` create the server is sent."""

    def __init__(
        self,
        inner: App,
        *,
        tool: str | None = None,
        arguments: Mapping[str, Any] | None = None,
        nth: int = 1,
    ) -> None:
        if (tool is None) != (arguments is None):
            raise ValueError("name a call by its tool and its arguments, or neither")
        if nth < 1:
            raise ValueError(f"nth counts creates from 1, not {nth}")
        self.inner = inner
        self.tool = tool
        self.arguments = None if arguments is None else dict(arguments)
        self.nth = nth
        self.creates = 0
        """Creates seen that matched (the one lost among them)."""
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

        if more or not self._is_the_create(scope, body):
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

    def _is_the_create(self, scope: Scope, body: bytes) -> bool:
        """Whether this request is the create to lose (counting the creates that match)."""
        call = _created_call(scope, body)
        if call is None:
            return False
        if self.tool is not None and call != (self.tool, self.arguments):
            return False
        self.creates += 1
        return self.creates == self.nth


def _created_call(scope: Scope, body: bytes) -> tuple[str, Any] | None:
    """(tool, arguments) of a create request, or None for any other request."""
    path = str(scope.get("path", ""))
    try:
        message = json.loads(body) if body else {}
    except ValueError:
        return None
    if path.endswith(AIP151_START_SUFFIX):
        tool = path.rsplit("/", 1)[-1][: -len(AIP151_START_SUFFIX)]
        return tool, message.get("arguments", {}) if isinstance(message, dict) else None
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return None
    params = message.get("params")
    if not isinstance(params, dict) or not isinstance(params.get("name"), str):
        return None
    return params["name"], params.get("arguments")


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    """The request body (up to the bound) and whether more of it is left unread."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        more = bool(message.get("more_body"))
        if not more or len(body) > BODY_BYTES_MAX:
            return body, more
