"""The request path's shortcuts keep what they stand in for: one send per answer loses
and reorders nothing, ``POST /mcp`` past the router still meets a caller's middleware,
and the JSON depth check refuses exactly what the full walk refuses."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from conftest import mcp_post_scope
from longcall.server import build_reference_server
from longcall.server.errors import Refused
from longcall.server.front import parse_json
from longcall.server.transport import CorkedTransport

pytestmark = pytest.mark.anyio


class RecordingTransport:
    """The part of a socket transport the corked one hands writes, closes and protocols to."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.protocol: Any = None

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol

    def get_write_buffer_size(self) -> int:
        return 7


def corked() -> tuple[CorkedTransport, RecordingTransport]:
    real = RecordingTransport()
    return CorkedTransport(real, asyncio.get_running_loop()), real  # type: ignore[arg-type]


async def test_the_writes_of_one_turn_leave_in_one_send_in_order() -> None:
    transport, real = corked()
    transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    transport.write(b"")
    transport.write(bytearray(b"{}"))
    assert real.writes == []
    await asyncio.sleep(0)  # the end of this turn of the loop
    assert real.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    transport.write(b"next")
    await asyncio.sleep(0)
    assert real.writes[1:] == [b"next"]


async def test_closing_or_switching_protocol_sends_what_is_held_first() -> None:
    transport, real = corked()
    transport.write(b"last words")
    transport.close()
    assert real.writes == [b"last words"]
    assert real.closed
    await asyncio.sleep(0)
    assert real.writes == [b"last words"]  # sent once, not again at the end of the turn

    transport, real = corked()
    transport.write(b"switching")
    protocol = object()
    transport.set_protocol(protocol)  # type: ignore[arg-type]
    assert real.writes == [b"switching"]
    assert real.protocol is protocol


async def test_nothing_is_handed_to_a_transport_already_closing() -> None:
    transport, real = corked()
    transport.write(b"too late")
    real.closed = True  # the peer went away within the turn
    await asyncio.sleep(0)
    assert real.writes == []
    assert transport.get_write_buffer_size() == 7  # everything else is the real one's


def asgi_post(body: bytes) -> tuple[Scope, Receive, Send, list[dict[str, Any]]]:
    """A ``POST /mcp`` as uvicorn would hand it over, and the messages sent back."""
    incoming = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    return mcp_post_scope(), receive, send, sent


async def test_a_post_to_mcp_meets_the_middleware_a_caller_added(store_path: str) -> None:
    """The shortcut past Starlette's router is taken only while nobody added middleware."""
    server = build_reference_server(store=store_path)
    seen: list[str] = []

    class Recorder:
        def __init__(self, app: ASGIApp) -> None:
            self.app = app

        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            seen.append(f"{scope.get('method')} {scope.get('path')}")
            await self.app(scope, receive, send)

    app = server.asgi_app()
    scope, receive, send, plain = asgi_post(b"{not json")
    await app(scope, receive, send)
    assert plain[0]["status"] == 400  # answered by the endpoint itself, the short way
    app.add_middleware(Recorder)
    scope, receive, send, sent = asgi_post(b"{not json")
    await app(scope, receive, send)
    assert seen == ["POST /mcp"]
    assert sent == plain
    assert json.loads(sent[1]["body"])["error"]["code"] == -32700


@pytest.mark.parametrize(
    ("body", "deep"),
    [
        (b"[[[[1]]]]", False),  # as deep as allowed, no walk needed
        (b"[[[[[1]]]]]", True),
        (b'{"a":{"b":{"c":{"d":{"e":1}}}}}', True),  # objects count as much as arrays
        (b'[{"a":[{"b":1}]}]', False),
        (b'{"text":"[[[[[[[[{{{{"}', False),  # brackets in a string are no nesting
        (b'[[[[{"x":"[[["}]]]]', True),
    ],
)
def test_the_depth_limit_refuses_exactly_what_is_nested_too_deep(body: bytes, deep: bool) -> None:
    if deep:
        with pytest.raises(Refused, match="nested deeper than 4"):
            parse_json(body, max_depth=4)
    else:
        assert parse_json(body, max_depth=4) == json.loads(body)
