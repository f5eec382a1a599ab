"""The event-stream format (WHATWG server-sent events), decoded incrementally and bounded.

Owns: :class:`SseDecoder` — bytes in, :class:`~longcall.adapters.exchange.SseEvent`
out, as they complete — with the rules servers rely on: an event with an ``id`` and
empty ``data`` is a priming event (SEP-1699), not a message; ``retry:`` sets the
reconnection delay; comments (``:``) are keep-alives; a line longer than the cap is a
typed failure, never unbounded memory (C4). And :func:`encode_event`, the inverse,
for servers the tests and the simulator stand up.

Must not: perform I/O or interpret ``data`` (JSON-RPC framing is the caller's).
"""

from __future__ import annotations

import dataclasses

from longcall.adapters.exchange import LINE_BYTES_MAX, HttpReply, SseEvent, TransportFailure
from longcall.core.retry import FailureKind


class LineTooLong(ValueError):
    """An event-stream line exceeded the cap (C4)."""

    def failure(self, http_status: int | None = None) -> TransportFailure:
        """As the typed failure it is on the wire: TOO_LARGE, never retried."""
        return TransportFailure(
            kind=FailureKind.TOO_LARGE,
            detail=str(self),
            processed_possible=True,
            http_status=http_status,
        )


class SseDecoder:
    """Feed it chunks; it returns the events each chunk completed."""

    def __init__(self, *, line_bytes_max: int = LINE_BYTES_MAX) -> None:
        self.line_bytes_max = line_bytes_max
        self.last_event_id: str | None = None
        """The id of the last event seen (``Last-Event-ID`` when resuming a stream)."""
        self.retry_ms: int | None = None
        self._pending = b""
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Decode ``chunk``; raise :class:`LineTooLong` past the line cap."""
        buffer = self._pending + chunk
        events: list[SseEvent] = []
        start = 0
        while True:
            end = _line_end(buffer, start)
            if end is None:
                break
            line_end, next_start = end
            line = buffer[start:line_end]
            if len(line) > self.line_bytes_max:
                raise self._too_long()
            event = self._line(line.decode("utf-8", "replace"))
            if event is not None:
                events.append(event)
            start = next_start
        self._pending = buffer[start:]
        if len(self._pending) > self.line_bytes_max:
            raise self._too_long()
        return events

    def _too_long(self) -> LineTooLong:
        return LineTooLong(f"an event-stream line is longer than {self.line_bytes_max} bytes")

    def close(self) -> list[SseEvent]:
        """The end of the stream: an unterminated event is dropped (the format says so)."""
        self._pending = b""
        self._reset()
        return []

    def _line(self, line: str) -> SseEvent | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment: keep-alive
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\x00" not in value:
            self._id = value
            self.last_event_id = value
        elif name == "retry" and value.isdigit():
            self.retry_ms = int(value)
        return None

    def _dispatch(self) -> SseEvent | None:
        if not self._data:
            # No data line: nothing to dispatch (an id- or retry-only event primes the
            # stream: its id is kept for a resume, SEP-1699).
            self._reset()
            return None
        event = SseEvent(
            data="\n".join(self._data),
            event=self._event or "message",
            id=self._id,
            retry_ms=self.retry_ms,
        )
        self._reset()
        return event

    def _reset(self) -> None:
        self._data = []
        self._event = ""
        self._id = None


def _line_end(buffer: bytes, start: int) -> tuple[int, int] | None:
    """(end of the line, start of the next) for the first CR, LF or CRLF after ``start``."""
    lf = buffer.find(b"\n", start)
    cr = buffer.find(b"\r", start)
    if cr == -1 and lf == -1:
        return None
    if cr == -1 or (lf != -1 and lf < cr):
        return lf, lf + 1
    if cr + 1 == len(buffer):
        return None  # a CR at the end may be the first half of a CRLF
    return cr, cr + 2 if buffer[cr + 1 : cr + 2] == b"\n" else cr + 1


def decoded(reply: HttpReply, *, line_bytes_max: int = LINE_BYTES_MAX) -> HttpReply:
    """An event-stream reply given as a whole body (a simulated or mocked server) with
    its events, last event id and ``retry:`` decoded, as the I/O shell hands them over.
    Raises :class:`LineTooLong`."""
    if not reply.is_event_stream or reply.events or not reply.body:
        return reply
    decoder = SseDecoder(line_bytes_max=line_bytes_max)
    events = tuple(decoder.feed(reply.body))
    return dataclasses.replace(
        reply,
        body=b"",
        events=events,
        last_event_id=decoder.last_event_id,
        retry_ms=decoder.retry_ms,
    )


def decode_all(body: bytes, *, line_bytes_max: int = LINE_BYTES_MAX) -> list[SseEvent]:
    """Every complete event of a whole event-stream body."""
    decoder = SseDecoder(line_bytes_max=line_bytes_max)
    return decoder.feed(body)


def encode_event(data: str, *, event: str | None = None, id: str | None = None) -> bytes:
    """One event in the wire format (``data`` may span lines)."""
    lines = []
    if id is not None:
        lines.append(f"id: {id}")
    if event is not None:
        lines.append(f"event: {event}")
    lines.extend(f"data: {part}" for part in data.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()


__all__ = ["LineTooLong", "SseDecoder", "decode_all", "decoded", "encode_event"]
