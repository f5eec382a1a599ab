"""The sans-I/O seam between a protocol mapping and whatever carries its bytes.

Owns: the HTTP-level values a mapping speaks in — :class:`HttpRequest` (what to send),
:class:`HttpReply` (what came back: status, headers, body, decoded event-stream
events) and :class:`TransportFailure` (no usable reply: refused, reset, timed out,
over a size cap) — the one table from an HTTP status that is not an answer to a
failure kind (X9, C3), and :data:`Exchange`, the shape of every adapter operation:
a generator that yields requests, is sent each reply, and returns the outcome.

Both drivers run the same generators: the I/O shell (:mod:`longcall.adapters.http`)
over httpx, and the simulator over its simulated network and servers. So the mapping
from wire to core events exists once (SPEC F1–F3 prove the product, not a copy).

Must not: perform I/O, read a clock, or draw randomness (the drivers do all three).
"""

from __future__ import annotations

import dataclasses
import email.utils
import json
import math
from collections.abc import Callable, Generator, Mapping
from datetime import datetime
from typing import Any, TypeVar

from longcall.core.retry import FailureKind

DEFAULT_TIMEOUT_S = 15.0
"""How long one request may take before it is a timeout, unless it says otherwise."""
RESPONSE_BYTES_MAX = 32 * 1024 * 1024
"""The largest answer read into memory (C4); above it the answer is a TOO_LARGE failure."""
LINE_BYTES_MAX = 1024 * 1024
"""The longest event-stream line accepted (C4)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StreamWatch:
    """How to read an event-stream answer that may never end on its own (the 2025-11-25
    ``tasks/result`` side channel): stop once a server request whose method is in
    ``stop_on`` arrived and ``gather_s`` passed without another, or after ``wait_s``
    with none. The driver keeps time; the mapping reads what was collected."""

    stop_on: frozenset[str]
    wait_s: float
    gather_s: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HttpRequest:
    """One HTTP request of a mapping, relative to the adapter's endpoint URL."""

    method: str = "POST"
    path: str = ""
    """Appended to the adapter's base URL (MCP: empty, the endpoint itself)."""
    query: Mapping[str, str] = dataclasses.field(default_factory=dict)
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Lower-case names. Credentials are never put here by a mapping: the driver adds them."""
    body: bytes | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    watch: StreamWatch | None = None
    delay_s: float = 0.0
    """Wait this long before sending (a server's ``retry:`` before resuming a stream)."""
    answer_id: int | None = None
    """The JSON-RPC id whose response ends an event stream: a server may keep a stream
    open after it (a resumed GET stream), so reading stops there."""
    json_body: Any = None
    """The body before encoding (what the simulated servers read); not sent separately."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SseEvent:
    """One server-sent event (the WHATWG event-stream format)."""

    data: str = ""
    event: str = "message"
    id: str | None = None
    retry_ms: int | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HttpReply:
    """What came back: the whole body, or — for ``text/event-stream`` — its events."""

    status: int
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Lower-case names."""
    body: bytes = b""
    events: tuple[SseEvent, ...] = ()
    stopped: bool = False
    """The driver ended an event stream early, as the request's :class:`StreamWatch` said."""
    last_event_id: str | None = None
    """The id of the last event of a stream (to resume it with ``Last-Event-ID``)."""
    retry_ms: int | None = None
    """The server's ``retry:`` for reconnecting this stream."""
    cut: str | None = None
    """Why an event stream broke off (a reset mid-stream); the events before it stand."""

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    @property
    def is_event_stream(self) -> bool:
        return self.content_type == "text/event-stream"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TransportFailure:
    """A request that produced no answer we may read as the operation's (X9, C3)."""

    kind: FailureKind
    detail: str
    processed_possible: bool
    """False only when the failure proves the server did not process the request
    (refused connection, 401/403, 429, a rejection of our framing): the X2 line
    between RequestFailed and SubmitOutcomeLost for a create."""
    retry_after_s: float | None = None
    http_status: int | None = None


Reply = HttpReply | TransportFailure
_T = TypeVar("_T")
Exchange = Generator[HttpRequest, Reply, _T]
"""An adapter operation: yields requests, is sent each reply, returns its result."""


# --- HTTP statuses that are not an answer (X9, C3) ------------------------------------------

HTTP_STATUS_FAILURES: Mapping[int, tuple[FailureKind, bool]] = {
    # status -> (kind, processed_possible)
    400: (FailureKind.BAD_REQUEST, False),
    401: (FailureKind.UNAUTHORIZED, False),
    403: (FailureKind.FORBIDDEN, False),
    404: (FailureKind.BAD_REQUEST, False),
    405: (FailureKind.BAD_REQUEST, False),
    406: (FailureKind.BAD_REQUEST, False),
    408: (FailureKind.TIMEOUT, True),
    413: (FailureKind.REFUSED_UNREAD, False),
    415: (FailureKind.BAD_REQUEST, False),
    429: (FailureKind.RATE_LIMITED, False),
    503: (FailureKind.UNAVAILABLE, True),
}
"""A status whose body is not the answer to our request. 4xx rejections of our framing
(406 Not Acceptable, 415, a 400 whose JSON-RPC error has ``id: null``) prove the request
was not processed; 429 too; a 5xx or 408 does not. 413 (a body over the server's
limit) is refused unread: the same request would be refused again."""


def http_status_failure(status: int) -> tuple[FailureKind, bool]:
    """The failure kind of an HTTP status that carried no answer, and whether the request
    may have been processed."""
    if status in HTTP_STATUS_FAILURES:
        return HTTP_STATUS_FAILURES[status]
    if status >= 500:
        return FailureKind.SERVER_ERROR, True
    return FailureKind.BAD_REQUEST, False


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """``Retry-After`` as seconds (delta-seconds or an HTTP date), None if absent or garbled.

    An HTTP date needs ``now`` (the driver's wall clock); without it the date is ignored.
    """
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        if now is None:
            return None
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=now.tzinfo)
        seconds = (when - now).total_seconds()
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(0.0, seconds)


def status_failure(reply: HttpReply, *, what: str = "") -> TransportFailure:
    """``reply`` as a failure: its status was not an answer to our request."""
    kind, processed_possible = http_status_failure(reply.status)
    text = reply.body[:200].decode("utf-8", "replace")
    prefix = f"{what}: " if what else ""
    return TransportFailure(
        kind=kind,
        detail=f"{prefix}HTTP {reply.status}: {text}".rstrip(": "),
        processed_possible=processed_possible,
        retry_after_s=parse_retry_after(reply.headers.get("retry-after")),
        http_status=reply.status,
    )


def malformed(detail: str, *, http_status: int | None = None) -> TransportFailure:
    """An answer we cannot read: the request may well have been processed."""
    return TransportFailure(
        kind=FailureKind.MALFORMED_RESPONSE,
        detail=detail,
        processed_possible=True,
        http_status=http_status,
    )


_COMPACT = json.JSONEncoder(separators=(",", ":"))


def compact_json(value: Any) -> str:
    """A JSON body as the wire carries it, with no spaces. One encoder serves every
    body (``json.dumps`` with ``separators`` builds a new one at each call)."""
    return _COMPACT.encode(value)


def settled(result: _T) -> Exchange[_T]:
    """An exchange that sends nothing and returns ``result`` (an answer known locally)."""
    return result
    yield  # pragma: no cover - makes this a generator


# --- driving an exchange without a network (tests, the simulator) ---------------------------


def run_exchange(exchange: Exchange[_T], serve: Callable[[HttpRequest], Reply]) -> _T:
    """Run ``exchange`` to its result, answering each request with ``serve`` at once."""
    try:
        request = next(exchange)
        while True:
            request = exchange.send(serve(request))
    except StopIteration as stop:
        result: _T = stop.value
        return result


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "HTTP_STATUS_FAILURES",
    "LINE_BYTES_MAX",
    "RESPONSE_BYTES_MAX",
    "Exchange",
    "HttpReply",
    "HttpRequest",
    "Reply",
    "SseEvent",
    "StreamWatch",
    "TransportFailure",
    "compact_json",
    "http_status_failure",
    "malformed",
    "parse_retry_after",
    "run_exchange",
    "settled",
    "status_failure",
]
