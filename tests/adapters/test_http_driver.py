"""The I/O shell's bounds and translations (C1, C4, X9): served by httpx's mock transport;
the send window (X3) by a real socket on 127.0.0.1, where httpcore traces a connection.

Regressions: a 100 MB ``tasks/get`` answer was read whole (545 MB peak) and stored; one
endless event-stream line cost 427 MB; a stream cut after the input requests arrived
lost them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from longcall.adapters.exchange import HttpReply, HttpRequest, StreamWatch, TransportFailure
from longcall.adapters.http import HttpDriver, LaneTransport, send_window
from longcall.adapters.mcp.rpc import RpcChannel, call
from longcall.core.retry import FailureKind
from longcall.errors import SendWindowPassed

pytestmark = pytest.mark.anyio
URL = "http://driver.invalid/mcp"


def driver(handler: Callable[[httpx.Request], httpx.Response], **kw: object) -> HttpDriver:
    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return HttpDriver(URL, http=http, **kw)  # type: ignore[arg-type]


class Chunks(httpx.AsyncByteStream):
    """A body produced chunk by chunk (so caps are hit while reading, not after)."""

    def __init__(self, chunks: list[bytes], *, then_fail: bool = False) -> None:
        self.chunks = chunks
        self.then_fail = then_fail
        self.sent = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            self.sent += len(chunk)
            yield chunk
        if self.then_fail:
            raise httpx.RemoteProtocolError("peer closed connection")


async def test_an_answer_over_the_size_cap_is_too_large() -> None:
    """Reading stops at the cap; the failure is typed and never retried (C4)."""
    body = Chunks([b"x" * 1024] * 64)
    d = driver(lambda r: httpx.Response(200, stream=body), response_bytes_max=8 * 1024)
    reply = await d.send(HttpRequest(body=b"{}"))
    assert isinstance(reply, TransportFailure)
    assert reply.kind is FailureKind.TOO_LARGE
    assert body.sent <= 10 * 1024


async def test_a_declared_oversize_answer_is_refused_before_reading() -> None:
    """A Content-Length over the cap is refused without reading the body (C4)."""
    d = driver(lambda r: httpx.Response(200, content=b"x" * 5000), response_bytes_max=1000)
    reply = await d.send(HttpRequest(body=b"{}"))
    assert isinstance(reply, TransportFailure)
    assert reply.kind is FailureKind.TOO_LARGE


async def test_an_endless_event_stream_line_is_too_large() -> None:
    """One line without an end costs at most the line cap (C4)."""
    stream = Chunks([b"data: "] + [b"y" * 4096] * 100)
    d = driver(
        lambda r: httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream),
        line_bytes_max=16 * 1024,
    )
    reply = await d.send(HttpRequest(body=b"{}"))
    assert isinstance(reply, TransportFailure)
    assert reply.kind is FailureKind.TOO_LARGE
    assert stream.sent <= 32 * 1024


async def test_a_stream_cut_after_what_was_asked_keeps_it() -> None:
    """Events before a reset stand; the reader decides what they were worth."""
    request_event = b'data: {"jsonrpc":"2.0","id":"q1","method":"elicitation/create"}\n\n'
    stream = Chunks([b"id: 1\ndata:\n\n", request_event], then_fail=True)
    d = driver(
        lambda r: httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)
    )
    watch = StreamWatch(stop_on=frozenset({"elicitation/create"}), wait_s=5.0, gather_s=0.05)
    reply = await d.send(HttpRequest(body=b"{}", watch=watch))
    assert isinstance(reply, HttpReply)
    assert [e.data for e in reply.events][-1].startswith('{"jsonrpc"')
    assert reply.cut is not None
    assert reply.last_event_id == "1"


async def test_configured_headers_go_on_every_request_and_requests_win() -> None:
    """Credentials come from the driver's configuration (C1), never from a mapping."""
    seen: list[httpx.Headers] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        return httpx.Response(200, json={})

    d = driver(handler, headers={"Authorization": "Bearer s3cret", "X-Tenant": "a"})
    await d.send(HttpRequest(body=b"{}", headers={"x-tenant": "b"}))
    assert seen[0]["authorization"] == "Bearer s3cret"
    assert seen[0]["x-tenant"] == "b"


async def test_refused_connection_proves_non_processing() -> None:
    """A refused connection is CONNECT_FAILED and says the request was not processed."""

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    reply = await driver(handler).send(HttpRequest(body=b"{}"))
    assert isinstance(reply, TransportFailure)
    assert (reply.kind, reply.processed_possible) == (FailureKind.CONNECT_FAILED, False)


async def test_an_http_date_retry_after_becomes_seconds() -> None:
    """The driver reads an HTTP-date Retry-After against its clock; mappings get seconds."""
    d = driver(
        lambda r: httpx.Response(
            429, headers={"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, content=b""
        )
    )
    reply = await d.send(HttpRequest(body=b"{}"))
    assert isinstance(reply, HttpReply)
    assert reply.headers["retry-after"] == "0"


async def test_a_401_asking_for_a_bearer_token_logs_in_once() -> None:
    """No configured credentials and a 401 ``WWW-Authenticate: Bearer``: the driver logs
    in (OAuth, C1) and sends the request again, once; other 401s are left as they are."""
    logins: list[int] = []

    class Token(httpx.Auth):
        def auth_flow(self, request: httpx.Request):  # type: ignore[no-untyped-def]
            request.headers["authorization"] = "Bearer fresh"
            yield request

    async def login() -> httpx.Auth:
        logins.append(1)
        return Token()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.headers.get("authorization") == "Bearer fresh":
            return httpx.Response(200, json={})
        return httpx.Response(401, headers={"www-authenticate": 'Bearer resource_metadata="x"'})

    d = driver(handler, login=login)
    first = await d.send(HttpRequest(body=b"{}"))
    second = await d.send(HttpRequest(body=b"{}"))
    assert isinstance(first, HttpReply)
    assert isinstance(second, HttpReply)
    assert (first.status, second.status, len(logins)) == (200, 200, 1)
    plain = driver(lambda r: httpx.Response(401, text="no"), login=login)
    refused = await plain.send(HttpRequest(body=b"{}"))
    assert isinstance(refused, HttpReply)
    assert refused.status == 401
    assert len(logins) == 1


class CountingServer:
    """An HTTP/1.1 server on 127.0.0.1 that answers ``{}`` and counts the requests whose
    bytes reached it (a real socket: the send window lives in the connection's trace)."""

    def __init__(self, *, event_stream: bool = False) -> None:
        self.requests = 0
        self.connections = 0
        self.event_stream = event_stream
        """Answer with an event stream (the JSON-RPC answer to id 1, then its end)."""
        self.url = ""
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> CountingServer:
        self._server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/mcp"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while head := await reader.readuntil(b"\r\n\r\n"):
                self.requests += 1
                length = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
                await reader.readexactly(int(length.group(1)) if length else 0)
                if self.event_stream:
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
                    writer.write(b"transfer-encoding: chunked\r\n\r\n")
                    event = b'data: {"jsonrpc":"2.0","id":1,"result":{}}\n\n'
                    writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                    await writer.drain()
                    # The end comes a moment after the answer, in a packet of its own (the
                    # server's behaviour under test, not a wait for anything).
                    await asyncio.sleep(0.01)
                    writer.write(b"0\r\n\r\n")
                else:
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
                    writer.write(b"content-length: 2\r\n\r\n{}")
                await writer.drain()
        writer.close()


async def test_a_request_whose_send_window_has_passed_is_never_written() -> None:
    """The window is asked when the connection is ready and the headers are about to be
    written: a closed one stops the request there, and the server sees nothing (X3)."""
    async with CountingServer() as server:
        d = HttpDriver(server.url)
        asked: list[bool] = []

        def closed() -> bool:
            asked.append(True)
            return False

        with send_window(closed), pytest.raises(SendWindowPassed):
            await d.send(HttpRequest(body=b"{}"))
        reply = await d.send(HttpRequest(body=b"{}"))  # outside the window: it leaves
        await d.aclose()
    assert asked == [True]
    assert isinstance(reply, HttpReply)
    assert reply.status == 200
    assert server.requests == 1


async def test_the_send_window_holds_the_first_request_of_the_block_only() -> None:
    """A poll is one request: a second request in the same block is not held back."""
    async with CountingServer() as server:
        d = HttpDriver(server.url)
        asked: list[bool] = []
        with send_window(lambda: asked.append(True) or True):
            first = await d.send(HttpRequest(body=b"{}"))
            second = await d.send(HttpRequest(body=b"{}"))
        await d.aclose()
    assert asked == [True]
    assert isinstance(first, HttpReply)
    assert isinstance(second, HttpReply)
    assert server.requests == 2


async def test_an_event_stream_answer_read_to_its_end_keeps_the_connection() -> None:
    """A stream the server ends right after the answer is read to its end, so its
    connection serves the next request (it was closed, one new connection per request)."""
    async with CountingServer(event_stream=True) as server:
        d = HttpDriver(server.url)
        replies = [await d.send(HttpRequest(body=b"{}", answer_id=1)) for _ in range(3)]
        await d.aclose()
    for reply in replies:
        assert isinstance(reply, HttpReply)
        assert [e.data for e in reply.events] == ['{"jsonrpc":"2.0","id":1,"result":{}}']
    assert (server.requests, server.connections) == (3, 1)


async def test_requests_in_flight_each_keep_a_connection_of_their_own() -> None:
    """Eight requests at a time, three rounds: a lane per request in flight, each of its
    connection reused round after round (httpx's shared pool kept 20 alive, and closed
    the rest); beyond the lanes, the overflow pool serves."""
    async with CountingServer() as server:
        d = HttpDriver(server.url, http=httpx.AsyncClient(transport=LaneTransport(lanes_max=6)))
        for _ in range(3):
            replies = await asyncio.gather(*(d.send(HttpRequest(body=b"{}")) for _ in range(8)))
            assert all(isinstance(r, HttpReply) and r.status == 200 for r in replies)
        assert (server.requests, server.connections) == (24, 8)
        transport = d.http._transport
        assert isinstance(transport, LaneTransport)
        assert len(transport._idle) == 6
        await d.http.aclose()
    assert transport._idle == []  # closed with its client: nothing kept


async def test_a_send_window_already_passed_stops_the_request_before_a_connection() -> None:
    """A slot that passed before the request takes a connection stops it there: no
    connection is opened (or lost), and the window's ``may_leave`` is not asked."""
    async with CountingServer() as server:
        d = HttpDriver(server.url)
        asked: list[bool] = []
        with (
            send_window(lambda: asked.append(True) or True, lambda: False),
            pytest.raises(SendWindowPassed),
        ):
            await d.send(HttpRequest(body=b"{}"))
        await d.aclose()
    assert asked == []
    assert (server.requests, server.connections) == (0, 0)


class AnswerThenHold(httpx.AsyncByteStream):
    """An event stream that sends the answer to id 1 and then stays open (never ends)."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b'data: {"jsonrpc":"2.0","id":1,"result":{"taskId":"t-1"}}\n\n'
        await asyncio.Event().wait()  # held open until the reader gives up on it


async def test_an_answer_in_hand_survives_the_timeout_firing_during_its_drain() -> None:
    """The request's time runs out while the stream's end is awaited after the answer:
    the answer is returned, never a timeout that discards it (X2)."""
    d = driver(
        lambda r: httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=AnswerThenHold()
        )
    )
    reply = await d.send(HttpRequest(body=b"{}", answer_id=1, timeout_s=0.02))
    assert isinstance(reply, HttpReply), reply
    assert [e.data for e in reply.events] == ['{"jsonrpc":"2.0","id":1,"result":{"taskId":"t-1"}}']


async def test_a_followed_redirect_asks_the_send_window_again() -> None:
    """A 307 hop is a request leaving again: a slot that passed since the first left
    stops it, and the target never sees it (X3)."""
    seen: list[str] = []

    def redirecting(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if request.url.path == "/mcp":
            return httpx.Response(307, headers={"location": "/mcp/"})
        return httpx.Response(200, json={})

    answers = iter([True, False])
    d = driver(redirecting)
    with send_window(lambda: True, lambda: next(answers)), pytest.raises(SendWindowPassed):
        await d.send(HttpRequest(body=b"{}"))
    assert seen == ["/mcp"]
    with send_window(lambda: True, lambda: True):
        reply = await d.send(HttpRequest(body=b"{}"))
    assert isinstance(reply, HttpReply)
    assert seen == ["/mcp", "/mcp", "/mcp/"]


async def test_a_resend_after_a_reopened_session_asks_the_send_window_again() -> None:
    """A request re-sent in a new session leaves again: a slot passed since the first
    one stops it, and the server sees no second copy (X3)."""
    seen: list[tuple[str, str | None]] = []

    def stateful(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        session = request.headers.get("mcp-session-id")
        seen.append((body.get("method", "?"), session))
        if body.get("method") == "initialize":
            result = {"protocolVersion": "2025-11-25", "capabilities": {}}
            answer = {"jsonrpc": "2.0", "id": body["id"], "result": result}
            return httpx.Response(200, json=answer, headers={"mcp-session-id": "s-2"})
        if "id" not in body:
            return httpx.Response(202)
        return httpx.Response(404, json={"jsonrpc": "2.0", "id": None, "error": {"code": -1}})

    channel = RpcChannel()
    channel.session_id = "s-1"
    answers = iter([True, False])
    d = driver(stateful)
    with send_window(lambda: True, lambda: next(answers)), pytest.raises(SendWindowPassed):
        await d.run(call(channel, "tasks/get", {"taskId": "t"}))
    assert [m for m, _ in seen] == ["tasks/get", "initialize", "notifications/initialized"]
