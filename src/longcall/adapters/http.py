"""The I/O shell every adapter shares: carry a mapping's requests over HTTP (httpx).

Owns: :class:`HttpDriver` — it sends each :class:`~longcall.adapters.exchange.HttpRequest`
of an exchange to the server, reads the reply within its bounds (the request's time
budget, the response size cap, the event-stream line cap: C4), ends an event stream
when the request's :class:`~longcall.adapters.exchange.StreamWatch` says so, hands
each event to an observer as it arrives (progress, X11), adds the configured headers
(credentials: C1), follows same-origin 307/308 redirects with the method and body kept
(:mod:`longcall.adapters.redirects` decides which), and translates httpx's exceptions
into :class:`~longcall.adapters.exchange.TransportFailure` once, here, where they enter.
It also owns :class:`LaneTransport`, the keep-alive connections a driver's own client
sends over (each connection a pool of its own: httpcore's shared pool scans every
pooled connection, and checks each against every other, for each request), and the
*send window* (:class:`SendWindow`): a poll that holds a send slot of
its server's shared budget is checked once more at the last moment before its bytes
are written, and does not leave if the slot has passed (X3, D1).

Must not: read protocol bodies (the mappings do), decide what a reply means, or let a
credential reach a failure's text.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import TypeVar

import anyio
import httpx

from longcall.adapters.exchange import (
    LINE_BYTES_MAX,
    RESPONSE_BYTES_MAX,
    Exchange,
    HttpReply,
    HttpRequest,
    Reply,
    SseEvent,
    TransportFailure,
    parse_retry_after,
    status_failure,
)
from longcall.adapters.redirects import next_hop
from longcall.adapters.sse import LineTooLong, SseDecoder
from longcall.core.retry import FailureKind
from longcall.errors import SendWindowPassed

DEFAULT_CONNECT_TIMEOUT_S = 5.0
LANES_MAX = 64
"""Keep-alive connections a driver's own client keeps to its server, one request on
each at a time (as many as the executor has requests in flight, by default); the
requests beyond them share one overflow pool."""
OVERFLOW_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)
"""The overflow pool's bounds (httpx's default pool)."""
ANSWER_DRAIN_S = 0.1
"""How long the end of an event stream is awaited after the answer came (the
connection then goes back to the pool); a stream still open then is cut."""
_T = TypeVar("_T")

EventObserver = Callable[[SseEvent], None]
"""Sees each event-stream event as it arrives (the adapter surfaces progress, X11)."""


class SendWindow:
    """ "May the request still leave now?", asked by the driver when the connection is
    ready and the request's headers are about to be written: after everything that
    can make a request late in this process (the adapter's own work, the connection
    pool, a new connection, other tasks of the event loop). The executor checks a
    poll's send slot before it calls the adapter too; a check that early alone let
    polls leave long after their slot whenever the event loop was held up, and the
    polls of several workers then bunched up at the server beyond the cap (X3, D1).
    Asked for the first request of the block only: a poll is one request."""

    def __init__(
        self, may_leave: Callable[[], bool], is_open: Callable[[], bool] | None = None
    ) -> None:
        self._may_leave = may_leave
        self._is_open = is_open
        self.asked = False
        """Whether a request asked (an adapter that sends without this driver never does)."""

    def is_open(self) -> bool:
        """Whether the slot has not passed yet, asked before the request takes a
        connection: ``may_leave`` without its side effects. A request stopped at the
        last moment costs its connection (httpcore closes a connection whose request
        was never written); one stopped here costs nothing."""
        return self._is_open is None or self._is_open()

    def may_leave(self) -> bool:
        self.asked = True
        return self._may_leave()


_SEND_WINDOW: contextvars.ContextVar[SendWindow | None] = contextvars.ContextVar(
    "longcall_send_window", default=None
)
_RESEND_WINDOW: contextvars.ContextVar[SendWindow | None] = contextvars.ContextVar(
    "longcall_resend_window", default=None
)
"""The window the block's first request was held to: asked again for a resend of it."""


@contextlib.contextmanager
def send_window(
    may_leave: Callable[[], bool], is_open: Callable[[], bool] | None = None
) -> Iterator[SendWindow]:
    """Within this block (this task), the next request the driver sends leaves only if
    ``may_leave()`` says so at the moment it is written (see :class:`SendWindow`);
    ``is_open`` (no side effects) is asked first, before a connection is taken."""
    window = SendWindow(may_leave, is_open)
    token = _SEND_WINDOW.set(window)
    resend_token = _RESEND_WINDOW.set(None)
    try:
        yield window
    finally:
        _RESEND_WINDOW.reset(resend_token)
        _SEND_WINDOW.reset(token)


def _resend_may_leave() -> bool:
    """Whether the window the block's first request was held to is still open."""
    first = _RESEND_WINDOW.get()
    return first is None or first.is_open()


def _window_trace(window: SendWindow) -> Callable[[str, object], Awaitable[None]]:
    """An httpcore trace hook that stops the request just before its headers are
    written when its send slot has passed."""

    async def trace(event: str, _info: object) -> None:
        if event.endswith(".send_request_headers.started") and not window.may_leave():
            raise SendWindowPassed("the send slot passed before the request could leave")

    return trace


class LaneTransport(httpx.AsyncBaseTransport):
    """Keep-alive HTTP connections for one client, each in a connection pool of its own
    (a *lane*): a request takes the idle lane used last (its connection is warm), or a
    new lane while there are fewer than ``lanes_max``, or else the shared overflow pool;
    its lane is idle again once its response is closed. The wire is httpx's own (each
    lane is an :class:`httpx.AsyncHTTPTransport` of one connection): what it saves is
    httpcore's pool upkeep, which scans every pooled connection (a socket check each,
    and each idle one counted against all the others) whenever a request is queued or
    a response closed: with 32 calls in flight that cost several times the exchange.
    One TLS context serves every lane."""

    def __init__(self, *, lanes_max: int = LANES_MAX, **options: object) -> None:
        self._options = {"verify": httpx.create_ssl_context(), **options}
        self._lanes_max = lanes_max
        self._lanes: list[httpx.AsyncHTTPTransport] = []
        self._idle: list[httpx.AsyncHTTPTransport] = []
        self._overflow: httpx.AsyncHTTPTransport | None = None

    def _lane(self, limits: httpx.Limits) -> httpx.AsyncHTTPTransport:
        return httpx.AsyncHTTPTransport(limits=limits, **self._options)  # type: ignore[arg-type]

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._idle:
            lane = self._idle.pop()
        elif len(self._lanes) < self._lanes_max:
            lane = self._lane(httpx.Limits(max_connections=1, max_keepalive_connections=1))
            self._lanes.append(lane)
        else:
            if self._overflow is None:
                self._overflow = self._lane(OVERFLOW_LIMITS)
            return await self._overflow.handle_async_request(request)
        try:
            response = await lane.handle_async_request(request)
        except BaseException:
            self._idle.append(lane)
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _LaneStream(response.stream, functools.partial(self._idle.append, lane))
        return response

    async def aclose(self) -> None:
        lanes, self._lanes, self._idle = self._lanes, [], []
        if self._overflow is not None:
            lanes.append(self._overflow)
            self._overflow = None
        for lane in lanes:
            await lane.aclose()


class _LaneStream(httpx.AsyncByteStream):
    """A lane's response body: closing it hands the lane back (once)."""

    def __init__(self, inner: httpx.AsyncByteStream, release: Callable[[], None]) -> None:
        self._inner = inner
        self._release: Callable[[], None] | None = release

    def __aiter__(self) -> AsyncIterator[bytes]:
        # The inner stream's own iterator: a generator of ours around it would add a
        # layer to every chunk read.
        return self._inner.__aiter__()

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            release, self._release = self._release, None
            if release is not None:
                release()


def failure_of_exception(exc: BaseException) -> TransportFailure:
    """Translate an httpx exception once, at the boundary (docs/design/layers.md)."""
    name = type(exc).__name__
    detail = f"{name}: {exc}" if str(exc) else name
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return TransportFailure(
            kind=FailureKind.CONNECT_FAILED, detail=detail, processed_possible=False
        )
    if isinstance(exc, httpx.PoolTimeout):
        return TransportFailure(kind=FailureKind.TIMEOUT, detail=detail, processed_possible=False)
    if isinstance(exc, httpx.TimeoutException):
        return TransportFailure(kind=FailureKind.TIMEOUT, detail=detail, processed_possible=True)
    return TransportFailure(kind=FailureKind.TRANSPORT, detail=detail, processed_possible=True)


class HttpDriver:
    """Runs exchanges against one base URL (an MCP endpoint, an AIP-151 API root)."""

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        auth: httpx.Auth | None = None,
        http: httpx.AsyncClient | None = None,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        response_bytes_max: int = RESPONSE_BYTES_MAX,
        line_bytes_max: int = LINE_BYTES_MAX,
        login: Callable[[], Awaitable[httpx.Auth]] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/") if base_url.endswith("//") else base_url
        self.headers = {k.lower(): v for k, v in (headers or {}).items()}
        """Sent on every request (credentials, C1); a request's own headers win."""
        self.auth = auth
        self.login = login
        """How to obtain credentials when a server asks for them (OAuth), if we may."""
        self.connect_timeout_s = connect_timeout_s
        self.response_bytes_max = response_bytes_max
        self.line_bytes_max = line_bytes_max
        self._owns_http = http is None
        self.http = http or httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=connect_timeout_s), transport=LaneTransport()
        )

    async def run(self, exchange: Exchange[_T], *, on_event: EventObserver | None = None) -> _T:
        """Carry ``exchange`` to its result."""
        try:
            request = next(exchange)
            while True:
                reply = await self.send(request, on_event=on_event)
                request = exchange.send(reply)
        except StopIteration as stop:
            result: _T = stop.value
            return result

    async def send(self, request: HttpRequest, *, on_event: EventObserver | None = None) -> Reply:
        """One request, bounded by its time budget; never raises for a remote failure.

        A 401 that asks for a bearer token, to a driver that has no credentials but knows
        how to log in (``login``), logs in once (OAuth, C1) and sends the request again."""
        reply = await self._bounded(request, on_event)
        if self.login is not None and self.auth is None and _asks_for_bearer(reply):
            self.auth = await self.login()
            reply = await self._bounded(request, on_event)
        return reply

    async def _bounded(self, request: HttpRequest, on_event: EventObserver | None) -> Reply:
        if request.delay_s > 0:
            await anyio.sleep(request.delay_s)
        outcome: Reply | None = None
        answered: list[Reply] = []  # an answer in hand, kept should the time run out after it
        with anyio.move_on_after(request.timeout_s) as scope:
            outcome = await self._send(request, on_event, scope, answered)
        if outcome is None and answered:
            # The time ran out while the connection was put away after the answer: the
            # answer stands (a create whose id we hold is never turned into "unknown", X2).
            return answered[0]
        if outcome is None:
            return TransportFailure(
                kind=FailureKind.TIMEOUT,
                detail=f"no complete answer within {request.timeout_s:g} s",
                processed_possible=True,
            )
        return outcome

    async def _send(
        self,
        request: HttpRequest,
        on_event: EventObserver | None,
        scope: anyio.CancelScope,
        answered: list[Reply],
    ) -> Reply:
        headers = {**self.headers, **request.headers}
        window = _SEND_WINDOW.get()
        extensions: dict[str, object] | None = None
        if window is not None:
            _SEND_WINDOW.set(None)  # the first request only (this task's own context)
            _RESEND_WINDOW.set(window)
            if not window.is_open():
                raise SendWindowPassed("the send slot passed before the request could leave")
            extensions = {"trace": _window_trace(window)}
        elif request.resend and not _resend_may_leave():
            raise SendWindowPassed("the send slot passed before the request was re-sent")
        try:
            async with self._following(
                request,
                headers,
                params=dict(request.query) or None,
                extensions=extensions,
                window=window,
            ) as response:
                if isinstance(response, TransportFailure):
                    return response
                reply_headers = {k.lower(): v for k, v in response.headers.items()}
                _normalise_retry_after(reply_headers)
                content_type = reply_headers.get("content-type", "").split(";")[0].strip()
                if content_type.lower() == "text/event-stream" and response.status_code < 400:
                    reply = await self._stream(request, response, reply_headers, on_event, scope)
                    answered.append(reply)  # closing the response may still meet the deadline
                    return reply
                return await self._body(response, reply_headers)
        except httpx.HTTPError as exc:
            return failure_of_exception(exc)

    @contextlib.asynccontextmanager
    async def _following(
        self,
        request: HttpRequest,
        headers: Mapping[str, str],
        *,
        params: Mapping[str, str] | None = None,
        extensions: dict[str, object] | None = None,
        bounds: httpx.Timeout | None = None,
        window: SendWindow | None = None,
    ) -> AsyncIterator[httpx.Response | TransportFailure]:
        """The response to ``request``, after following the redirects we follow (same
        origin, 307/308, a few hops: :func:`~longcall.adapters.redirects.next_hop`), with
        the same method, body and headers; or the failure of a refused redirect.

        A followed hop is a request that leaves again: the send ``window`` (if any) is
        asked again before it, and a slot passed meanwhile stops it (the 307/308 proved
        the first one was not processed, so nothing is lost)."""
        url = self.base_url + request.path
        hops = 0
        while True:
            async with self.http.stream(
                request.method,
                url,
                params=params,
                content=request.body,
                headers=headers,
                auth=self.auth if self.auth is not None else httpx.USE_CLIENT_DEFAULT,
                extensions=extensions,
                timeout=bounds if bounds is not None else httpx.USE_CLIENT_DEFAULT,
            ) as response:
                hop = next_hop(
                    str(response.url),
                    response.status_code,
                    response.headers.get("location"),
                    hops=hops,
                )
                if hop is None or isinstance(hop, TransportFailure):
                    yield response if hop is None else hop
                    return
            if window is not None and not window.is_open():
                raise SendWindowPassed("the send slot passed before the redirected request")
            # The target's URL carries its own query.
            url, params, extensions, hops = hop, None, None, hops + 1

    async def _body(self, response: httpx.Response, headers: dict[str, str]) -> Reply:
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.response_bytes_max:
            return self._too_large(response.status_code)
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > self.response_bytes_max:
                return self._too_large(response.status_code)
            chunks.append(chunk)
        return HttpReply(status=response.status_code, headers=headers, body=b"".join(chunks))

    async def _stream(
        self,
        request: HttpRequest,
        response: httpx.Response,
        headers: dict[str, str],
        on_event: EventObserver | None,
        scope: anyio.CancelScope,
    ) -> Reply:
        decoder = SseDecoder(line_bytes_max=self.line_bytes_max)
        events: list[SseEvent] = []
        watch = request.watch
        stopped = False
        cut: str | None = None
        size = 0
        answered = False
        with anyio.CancelScope() as watch_scope:
            if watch is not None:
                watch_scope.deadline = anyio.current_time() + watch.wait_s
            try:
                async for chunk in response.aiter_bytes():
                    if answered:
                        continue  # the stream's rest after the answer: read, not kept
                    size += len(chunk)
                    if size > self.response_bytes_max:
                        return self._too_large(response.status_code)
                    for event in decoder.feed(chunk):
                        events.append(event)
                        if on_event is not None:
                            with contextlib.suppress(Exception):  # an observer never breaks I/O
                                on_event(event)
                        if watch is not None and _asks(event, watch.stop_on):
                            # Gather the siblings sent with it, then stop (X4).
                            watch_scope.deadline = anyio.current_time() + watch.gather_s
                        if request.answer_id is not None and _is_response(event, request.answer_id):
                            # The answer is here; nothing after it counts. The stream's
                            # end (a server closes it right after the answer) is still
                            # read, briefly: httpcore closes a connection whose response
                            # was not read to its end instead of returning it to the pool.
                            # Shielded: the request's own deadline must not cut this
                            # short and discard the answer (the drain has its own bound).
                            answered = True
                            drained = anyio.current_time() + ANSWER_DRAIN_S
                            watch_scope.deadline = min(watch_scope.deadline, drained)
                            watch_scope.shield = True
            except LineTooLong as exc:
                return exc.failure(response.status_code)
            except httpx.HTTPError as exc:
                # Cut mid-stream: what arrived before stands (the reader decides whether
                # the answer, or what a watch waited for, was among it).
                cut = failure_of_exception(exc).detail
        if watch_scope.cancelled_caught and watch is not None:
            stopped = True
        if scope.cancel_called and not answered:
            return TransportFailure(
                kind=FailureKind.TIMEOUT,
                detail=f"no complete answer within {request.timeout_s:g} s",
                processed_possible=True,
            )
        return HttpReply(
            status=response.status_code,
            headers=headers,
            events=tuple(events),
            stopped=stopped,
            last_event_id=decoder.last_event_id,
            retry_ms=decoder.retry_ms,
            cut=cut,
        )

    async def listen(
        self, request: HttpRequest, *, on_event: EventObserver, idle_s: float
    ) -> Reply:
        """Hold one push stream open, handing every event to ``on_event`` (X3). No total
        time budget — an idle stream is not a dead one — but silence longer than
        ``idle_s`` is (C4). Returns when the stream ends: an event-stream reply whose
        ``events`` hold the final JSON-RPC answer if the server sent one (it ended the
        stream on purpose), a refusal, or the failure that broke it. Events are not
        kept: a stream may run for days."""
        headers = {**self.headers, **request.headers}
        timeout = httpx.Timeout(idle_s, connect=self.connect_timeout_s)
        try:
            async with self._following(request, headers, bounds=timeout) as response:
                if isinstance(response, TransportFailure):
                    return response
                reply_headers = {k.lower(): v for k, v in response.headers.items()}
                _normalise_retry_after(reply_headers)
                content_type = reply_headers.get("content-type", "").split(";")[0].strip()
                if response.status_code >= 400 or content_type.lower() != "text/event-stream":
                    body = await self._body(response, reply_headers)
                    if isinstance(body, HttpReply) and body.status >= 400:
                        return status_failure(body)
                    return body
                decoder = SseDecoder(line_bytes_max=self.line_bytes_max)
                final: tuple[SseEvent, ...] = ()
                async for chunk in response.aiter_bytes():
                    for event in decoder.feed(chunk):
                        with contextlib.suppress(Exception):  # an observer never breaks I/O
                            on_event(event)
                        if _is_response(event):
                            final = (event,)
                return HttpReply(status=response.status_code, headers=reply_headers, events=final)
        except LineTooLong as exc:
            return exc.failure()
        except httpx.HTTPError as exc:
            return failure_of_exception(exc)

    def _too_large(self, status: int) -> TransportFailure:
        return TransportFailure(
            kind=FailureKind.TOO_LARGE,
            detail=f"the answer is larger than {self.response_bytes_max} bytes",
            processed_possible=True,
            http_status=status,
        )

    async def aclose(self) -> None:
        if self._owns_http:
            await self.http.aclose()


def _asks(event: SseEvent, methods: frozenset[str]) -> bool:
    """Whether an event carries a server request for one of ``methods``."""
    try:
        message = json.loads(event.data)
    except ValueError:
        return False
    return isinstance(message, dict) and message.get("method") in methods and "id" in message


def _is_response(event: SseEvent, request_id: int | None = None) -> bool:
    """Whether an event carries a JSON-RPC response (to ``request_id``, if given)."""
    try:
        message = json.loads(event.data)
    except ValueError:
        return False
    if not isinstance(message, dict) or "id" not in message:
        return False
    if request_id is not None and message["id"] != request_id:
        return False
    return "result" in message or "error" in message


def _asks_for_bearer(reply: Reply) -> bool:
    """A 401 whose ``WWW-Authenticate`` names the Bearer scheme (RFC 6750, MCP auth)."""
    if not isinstance(reply, HttpReply) or reply.status != 401:
        return False
    return "bearer" in reply.headers.get("www-authenticate", "").lower()


def _normalise_retry_after(headers: dict[str, str]) -> None:
    """An HTTP-date ``Retry-After`` becomes delta-seconds, read against this machine's
    clock here, so the mappings (pure) never need one."""
    value = headers.get("retry-after")
    if value is None or value.strip().isdigit():
        return
    seconds = parse_retry_after(value, now=datetime.now(UTC))
    if seconds is None:
        del headers["retry-after"]
    else:
        headers["retry-after"] = str(math.ceil(seconds))


__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "EventObserver",
    "HttpDriver",
    "LaneTransport",
    "SendWindow",
    "SendWindowPassed",
    "failure_of_exception",
    "send_window",
]
