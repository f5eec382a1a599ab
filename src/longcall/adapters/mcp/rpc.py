"""JSON-RPC over MCP Streamable HTTP, without I/O: frame a request, read its answer.

Owns: the wire constants of MCP both versions; the two request dialects (2026-07-28:
the per-request ``_meta`` envelope and the ``Mcp-Method``/``Mcp-Name`` headers;
2025-11-25: plain, with the session's protocol-version header); :class:`RpcChannel`,
the per-server framing state (request ids, the ``Mcp-Session-Id`` a stateful server
issued); and :meth:`RpcChannel.read`, the one place that decides whether an HTTP reply
is the answer to OUR request (C3):

* only a JSON-RPC response whose ``id`` is our request's is an answer — a result or a
  JSON-RPC error the operation may own;
* a JSON-RPC error with ``id: null`` (the server could not read our request: a 406 for
  the Accept header, a 415, a parse error) and any HTTP status that carries no answer
  (401/403/406/429/5xx…) are transport failures, never an operation's outcome;
* an event stream is read event by event: priming events (an id, no data) and
  keep-alives are skipped, server requests and notifications are collected, and a
  stream that ends before the answer is a transport failure.

Every request accepts both ``application/json`` and ``text/event-stream``, as Streamable
HTTP requires of a client.

Sessions (Streamable HTTP, a stateful server): the ``Mcp-Session-Id`` is taken only from
a successful answer to ``initialize`` (a server may stamp one on any reply — the Python
SDK 1.x does on its 400 "Missing session ID" to a request sent without one — and such an
id names a session nobody opened); ``initialize`` itself goes out without one. A 404 to
a request that carried our session is the server saying the session is gone: :func:`call`
opens a new one (:func:`open_session`) once and sends that request again. That 404
comes before the server reads the request, so the request was not processed — a create
included; a request whose fate is unknown (a timeout, a cut stream) is never re-sent
here: the executor owns that (the submission-key lookup, X2).

Must not: perform I/O, read a clock, or decide protocol semantics (what a result means
is the version mappings').
"""

from __future__ import annotations

import base64
import dataclasses
import itertools
import json
from collections.abc import Mapping
from typing import Any

from longcall.adapters.exchange import (
    DEFAULT_TIMEOUT_S,
    Exchange,
    HttpReply,
    HttpRequest,
    Reply,
    StreamWatch,
    TransportFailure,
    compact_json,
    http_status_failure,
    malformed,
    status_failure,
)
from longcall.adapters.sse import LineTooLong, decoded
from longcall.core.retry import FailureKind

JSONRPC_PARSE_ERROR = -32700

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
SUBMISSION_KEY_EXTENSION = "dev.longcall/submissionKey"
"""The project's submission-key extension (S3): its id is also the request ``_meta`` key."""
DEFAULT_LOOKUP_METHOD = "longcall/tasks/lookup"
RELATED_TASK_META_KEY = "io.modelcontextprotocol/related-task"
PROTOCOL_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_META_KEY = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_META_KEY = "io.modelcontextprotocol/clientInfo"
SYNC_TIMEOUT_META_KEY = "dev.longcall/syncTimeoutS"
"""A tool may declare its synchronous limit in its descriptor ``_meta`` (X1, X10)."""
TOOLS_LIST_CHANGED = "notifications/tools/list_changed"
SESSION_HEADER = "mcp-session-id"
ACCEPT = "application/json, text/event-stream"
"""Streamable HTTP: a client MUST accept both on every POST."""
RESUMES_MAX = 3
"""How often one request's broken event stream is resumed before it counts as cut."""
RESUME_DELAY_MAX_S = 30.0
"""A server's ``retry:`` is honoured up to this long."""
OLDER_VERSIONS = ("2025-06-18", "2025-03-26")
"""Versions a server may answer ``initialize`` with: plain tools only (no tasks)."""
CLIENT_INFO = {"name": "longcall", "version": "0"}
CLIENT_CAPABILITIES: Mapping[str, Any] = {"elicitation": {"form": {}}}
"""What we answer (X4): form elicitation, through the approval gate. A server must not
send input requests the client did not declare (2025-11-25 ``initialize``; 2026-07-28
per-request capabilities, SEP-2322)."""


class Dialect:
    """How one protocol version frames a request: ``_meta`` and headers."""

    version: str = LEGACY

    def meta(self, method: str, *, consent: bool) -> dict[str, Any]:
        return {}

    def headers(self, method: str, name: str | None) -> dict[str, str]:
        return {"mcp-protocol-version": self.version}


class ModernDialect(Dialect):
    """2026-07-28: the per-request envelope, ``Mcp-Method`` always, ``Mcp-Name`` where
    required (tools/call: the tool; tasks/*: the task id; SEP-2663)."""

    version = MODERN

    def meta(self, method: str, *, consent: bool) -> dict[str, Any]:
        capabilities: dict[str, Any] = {**CLIENT_CAPABILITIES}
        if consent:
            # P1: consent is per request, on every request that may return a task and on
            # every tasks/* request ("Servers MUST NOT infer capabilities").
            capabilities["extensions"] = {TASKS_EXTENSION: {}}
        return {
            PROTOCOL_VERSION_META_KEY: MODERN,
            CLIENT_CAPABILITIES_META_KEY: capabilities,
            CLIENT_INFO_META_KEY: dict(CLIENT_INFO),
        }

    def headers(self, method: str, name: str | None) -> dict[str, str]:
        headers = {"mcp-protocol-version": MODERN, "mcp-method": method}
        if name is not None:
            headers["mcp-name"] = header_value(name)
        return headers


def header_value(value: str) -> str:
    """A header-safe value: as is when printable ASCII, else the SEP-2663 base64 sentinel."""
    if value.isascii() and value.isprintable() and value == value.strip():
        return value
    return "=?base64?" + base64.b64encode(value.encode()).decode() + "?="


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RpcAnswer:
    """The answer to our request: exactly one of ``result`` / ``error`` is set, unless
    ``stopped`` (the stream was ended by its watch before the answer came). ``messages``
    are the server requests and notifications seen on the way, in order."""

    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    messages: tuple[dict[str, Any], ...] = ()
    stopped: bool = False
    http_status: int = 200


RpcReply = RpcAnswer | TransportFailure


class RpcChannel:
    """The JSON-RPC framing state of one client at one MCP endpoint (pure)."""

    def __init__(self, dialect: Dialect | None = None) -> None:
        self.dialect = dialect or Dialect()
        self.session_id: str | None = None
        """Issued by a stateful server (``Mcp-Session-Id``) with its answer to ``initialize``;
        sent back on every later request."""
        self.initialized: dict[str, Any] | None = None
        """What the server answered to ``initialize`` in this session (2025-11-25)."""
        self.session_expired = False
        """The server answered 404 to our session: it ended it (a new one is needed)."""
        self.tools_epoch = 0
        """Counts the times what the server lists may have changed under us: a
        ``notifications/tools/list_changed`` seen, or a session opened. A listing read
        at one epoch says nothing of a later one."""
        self._ids = itertools.count(1)

    def _headers(self, extra: Mapping[str, str], *, opening: bool = False) -> dict[str, str]:
        headers = {"accept": ACCEPT, "content-type": "application/json"}
        if self.session_id is not None and not opening:
            headers[SESSION_HEADER] = self.session_id
        headers.update(extra)
        return headers

    def request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        *,
        name: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        watch: StreamWatch | None = None,
    ) -> tuple[HttpRequest, int]:
        """A request and its id; ``name`` goes to ``Mcp-Name`` (2026-07-28)."""
        request_id = next(self._ids)
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            body["params"] = dict(params)
        framing = self.dialect.headers(method, name) if headers is None else headers
        return self._post(body, framing, timeout_s=timeout_s, watch=watch), request_id

    def resume(
        self, last_event_id: str, *, retry_ms: int | None = None, answer_id: int | None = None
    ) -> HttpRequest:
        """A GET that resumes a broken event stream after ``last_event_id``; reading it
        ends at the response to ``answer_id``."""
        headers = {**self._headers(self.dialect.headers("", None)), "accept": "text/event-stream"}
        headers.pop("content-type", None)
        headers["last-event-id"] = last_event_id
        delay_s = min(RESUME_DELAY_MAX_S, (retry_ms or 0) / 1000.0)
        return HttpRequest(method="GET", headers=headers, delay_s=delay_s, answer_id=answer_id)

    def notification(self, method: str, params: Mapping[str, Any] | None = None) -> HttpRequest:
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            body["params"] = dict(params)
        return self._post(body, self.dialect.headers(method, None))

    def response(self, request_id: Any, result: Mapping[str, Any]) -> HttpRequest:
        """Our answer to a server request (the 2025-11-25 input side channel)."""
        body = {"jsonrpc": "2.0", "id": request_id, "result": dict(result)}
        return self._post(body, self.dialect.headers("", None))

    def _post(
        self,
        body: dict[str, Any],
        headers: Mapping[str, str],
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        watch: StreamWatch | None = None,
    ) -> HttpRequest:
        # An initialize opens a session: it never carries one (Streamable HTTP).
        opening = body.get("method") == "initialize"
        return HttpRequest(
            method="POST",
            headers=self._headers(headers, opening=opening),
            body=compact_json(body).encode(),
            json_body=body,
            timeout_s=timeout_s,
            watch=watch,
        )

    # --- reading ------------------------------------------------------------------------

    def read(self, reply: Reply, request_id: int, *, watch: StreamWatch | None = None) -> RpcReply:
        """The answer to request ``request_id`` in ``reply``, or why there is none (C3).

        With ``watch``, a stream that ended after bringing a request it waits for is as
        good as one the driver stopped: what was asked for arrived."""
        if isinstance(reply, TransportFailure):
            return reply
        status = reply.status
        if status == 429 or status >= 500 or status in (401, 403, 406, 408, 415):
            return status_failure(reply)
        if reply.is_event_stream:
            try:
                return _read_stream(decoded(reply), request_id, watch)
            except LineTooLong as exc:
                return exc.failure(reply.status)
        return _read_json(reply, request_id)

    def accepted(self, reply: Reply) -> TransportFailure | None:
        """Whether a posted notification or response was taken (None) or refused."""
        if isinstance(reply, TransportFailure):
            return reply
        if reply.status in (200, 202, 204):
            return None
        return status_failure(reply)

    def note_session(self, request: HttpRequest, reply: Reply) -> None:
        """Keep the session a stateful server issues with its answer to ``initialize``
        (and no other: an id stamped on a refusal names no session we opened); forget
        ours when the server answers 404 to a request that carried it (Streamable HTTP)."""
        if isinstance(reply, TransportFailure):
            return
        if _is_opening(request):
            issued = reply.headers.get(SESSION_HEADER)
            if issued and reply.status < 400:
                self.session_id = issued
            return
        carried = request.headers.get(SESSION_HEADER)
        if reply.status == 404 and carried is not None and carried == self.session_id:
            self.forget_session()

    def note_messages(self, answer: RpcReply) -> None:
        """Count a change of the tool list the server announced on the way."""
        if isinstance(answer, RpcAnswer) and any(
            message.get("method") == TOOLS_LIST_CHANGED for message in answer.messages
        ):
            self.tools_epoch += 1

    def forget_session(self) -> None:
        """The server ended our session: a new one is needed before the next request."""
        self.session_id = None
        self.session_expired = True

    def end_session(self) -> HttpRequest | None:
        """The DELETE that ends our session, if we hold one."""
        if self.session_id is None:
            return None
        headers = {**self.dialect.headers("", None), SESSION_HEADER: self.session_id}
        return HttpRequest(method="DELETE", headers=headers)


def call(
    channel: RpcChannel,
    method: str,
    params: Mapping[str, Any] | None,
    *,
    name: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    watch: StreamWatch | None = None,
) -> Exchange[RpcReply]:
    """One JSON-RPC request and its answer, as an exchange.

    A 404 to a request that carried our session (the server ended it) opens a new
    session once and sends the request again in it; see the module docstring. When
    another request already opened the new session (the channel holds another id than
    this request carried) it is sent again there, without a session of its own: a
    third session would orphan what the other request just sent in the second. A task
    create is not sent again in a session that agreed on another protocol version or
    no longer offers tasks: the refusal stands (it proves the create was not processed)."""
    attempt = _attempt(channel, method, params, name, headers, timeout_s, watch)
    sent, answer = yield from attempt
    if not _session_refused(sent, answer):
        return answer
    if channel.session_id is not None and channel.session_id != sent.headers.get(SESSION_HEADER):
        _sent, answer = yield from _attempt(
            channel, method, params, name, headers, timeout_s, watch, resend=True
        )
        return answer
    before = dict(channel.initialized or {})
    opened = yield from open_session(channel)
    if not isinstance(opened, Mapping):
        return answer  # no new session: the original refusal says what happened
    if _creates_task(method, params) and not _same_tasks_terms(before, opened):
        return answer
    _sent, answer = yield from _attempt(
        channel, method, params, name, headers, timeout_s, watch, resend=True
    )
    return answer


def _creates_task(method: str, params: Mapping[str, Any] | None) -> bool:
    """Whether the request asks the server to create a task (a 2025-11-25 task call)."""
    return method == "tools/call" and params is not None and "task" in params


def _same_tasks_terms(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether a re-opened session agreed on the version, and the tasks capability, the
    session it replaces had (a create sent on other terms could be read otherwise)."""
    if before.get("protocolVersion") != after.get("protocolVersion"):
        return False
    return _tasks_of(after) == _tasks_of(before) or (
        _tasks_of(before) is None and _tasks_of(after) is not None
    )


def _tasks_of(initialized: Mapping[str, Any]) -> object:
    capabilities = initialized.get("capabilities")
    return capabilities.get("tasks") if isinstance(capabilities, Mapping) else None


def _attempt(
    channel: RpcChannel,
    method: str,
    params: Mapping[str, Any] | None,
    name: str | None,
    headers: Mapping[str, str] | None,
    timeout_s: float,
    watch: StreamWatch | None,
    *,
    resend: bool = False,
) -> Exchange[tuple[HttpRequest, RpcReply]]:
    """Send the request once (resuming its broken event stream, up to
    :data:`RESUMES_MAX` times); the request as sent and its answer. A ``resend`` is
    marked so (the driver asks the send window again before it leaves)."""
    request, request_id = channel.request(
        method, params, name=name, headers=headers, timeout_s=timeout_s, watch=watch
    )
    if resend:
        request = dataclasses.replace(request, resend=True)
    reply = _decoded((yield request))
    channel.note_session(request, reply)
    answer = channel.read(reply, request_id, watch=watch)
    channel.note_messages(answer)
    for _resume in range(RESUMES_MAX):
        if not _resumable(answer, reply):
            break
        assert isinstance(reply, HttpReply)
        assert reply.last_event_id is not None
        # The stream broke before the answer: resume it where it stopped (Streamable
        # HTTP: GET with Last-Event-ID, after the server's retry: delay).
        resume = channel.resume(reply.last_event_id, retry_ms=reply.retry_ms, answer_id=request_id)
        again = _decoded((yield resume))
        if isinstance(again, TransportFailure) or not again.is_event_stream:
            break
        reply = dataclasses.replace(
            again,
            events=(*reply.events, *again.events),
            last_event_id=again.last_event_id or reply.last_event_id,
            retry_ms=again.retry_ms or reply.retry_ms,
        )
        answer = channel.read(reply, request_id, watch=watch)
        channel.note_messages(answer)
    return request, answer


def _session_refused(request: HttpRequest, answer: RpcReply) -> bool:
    """Whether the server refused ``request`` for its session alone: a 404 that answers
    nothing of ours, to a request that carried a session. The server says so before it
    reads the request (Streamable HTTP), so the request was not processed."""
    return (
        isinstance(answer, TransportFailure)
        and answer.http_status == 404
        and not answer.processed_possible
        and SESSION_HEADER in request.headers
        and not _is_opening(request)
    )


def _is_opening(request: HttpRequest) -> bool:
    body = request.json_body
    return isinstance(body, Mapping) and body.get("method") == "initialize"


def open_session(channel: RpcChannel) -> Exchange[Mapping[str, Any] | RpcReply]:
    """``initialize`` (2025-11-25, declaring the capabilities we answer, X4) and
    ``notifications/initialized``: the ``InitializeResult``, or the failed reply.

    A stateful server issues the session with its answer; a server must not send input
    requests a client did not declare."""
    params = {
        "protocolVersion": LEGACY,
        "capabilities": dict(CLIENT_CAPABILITIES),
        "clientInfo": dict(CLIENT_INFO),
    }
    _sent, answer = yield from _attempt(
        channel,
        "initialize",
        params,
        None,
        {"mcp-protocol-version": LEGACY},
        DEFAULT_TIMEOUT_S,
        None,
    )
    if isinstance(answer, TransportFailure) or answer.result is None:
        return answer
    version = answer.result.get("protocolVersion")
    if version not in (LEGACY, *OLDER_VERSIONS):
        return answer
    channel.dialect = dialect_of(str(version))
    channel.initialized = dict(answer.result)
    channel.session_expired = False
    channel.tools_epoch += 1  # a new session may list other tools
    yield from post(channel, channel.notification("notifications/initialized"))
    return answer.result


def dialect_of(version: str) -> Dialect:
    """The plain dialect of a version ``initialize`` agreed on."""
    dialect = Dialect()
    dialect.version = version
    return dialect


def _decoded(reply: Reply) -> Reply:
    if isinstance(reply, TransportFailure):
        return reply
    try:
        return decoded(reply)
    except LineTooLong as exc:
        return exc.failure(reply.status)


def _resumable(answer: RpcReply, reply: Reply) -> bool:
    return (
        isinstance(answer, TransportFailure)
        and answer.kind is FailureKind.TRANSPORT
        and isinstance(reply, HttpReply)
        and reply.is_event_stream
        and reply.last_event_id is not None
    )


def post(channel: RpcChannel, request: HttpRequest) -> Exchange[TransportFailure | None]:
    """Post a notification or a response; None when the server took it. Never sent
    again: a response belongs to the session the server asked in."""
    reply = yield request
    channel.note_session(request, reply)
    return channel.accepted(reply)


def _read_json(reply: HttpReply, request_id: int) -> RpcReply:
    try:
        message = json.loads(reply.body)
    except ValueError:
        if reply.status >= 400:
            return status_failure(reply)
        return malformed(
            f"HTTP {reply.status}: the body is not JSON ({len(reply.body)} bytes)",
            http_status=reply.status,
        )
    answer = _answer_of(message, request_id, reply.status)
    if answer is not None:
        return answer
    if reply.status >= 400:
        return status_failure(reply)
    return malformed(
        f"HTTP {reply.status}: not a JSON-RPC answer to request {request_id}",
        http_status=reply.status,
    )


def _read_stream(reply: HttpReply, request_id: int, watch: StreamWatch | None) -> RpcReply:
    messages: list[dict[str, Any]] = []
    for event in reply.events:
        if not event.data.strip():
            continue  # a priming event or an empty keep-alive (SEP-1699)
        try:
            message = json.loads(event.data)
        except ValueError:
            return malformed("an event-stream message is not JSON", http_status=reply.status)
        answer = _answer_of(message, request_id, reply.status)
        if isinstance(answer, TransportFailure):
            return answer
        if answer is not None:
            return dataclasses.replace(answer, messages=tuple(messages))
        if isinstance(message, dict) and "method" in message:
            messages.append(message)
    asked = watch is not None and any(
        m.get("method") in watch.stop_on and "id" in m for m in messages
    )
    if reply.stopped or asked:
        return RpcAnswer(stopped=True, messages=tuple(messages), http_status=reply.status)
    ended = f"was cut ({reply.cut})" if reply.cut else "ended"
    return TransportFailure(
        kind=FailureKind.TRANSPORT,
        detail=f"the event stream {ended} before the answer",
        processed_possible=True,
        http_status=reply.status,
    )


def _answer_of(message: Any, request_id: int, status: int) -> RpcReply | None:
    """The answer to ``request_id`` in ``message``, a transport failure when the message
    is an error about no request of ours (``id: null``), or None when it is not one."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or "method" in message:
        return None
    error = message.get("error")
    if isinstance(error, dict) and isinstance(error.get("code"), int):
        if message.get("id") is None:
            # C3: the server could not read our request; the error answers nothing.
            kind, processed_possible = http_status_failure(max(status, 400))
            if error.get("code") == JSONRPC_PARSE_ERROR:  # our bytes cannot be read: never again
                kind = FailureKind.REFUSED_UNREAD
            return TransportFailure(
                kind=kind,
                detail=f"HTTP {status}: the request was refused before it was read "
                f"(JSON-RPC {error.get('code')}: {error.get('message')})",
                processed_possible=processed_possible,
                http_status=status,
            )
        if message.get("id") != request_id:
            return None
        return RpcAnswer(error=error, http_status=status)
    if message.get("id") != request_id or not isinstance(message.get("result"), dict):
        return None
    return RpcAnswer(result=message["result"], http_status=status)


__all__ = [
    "ACCEPT",
    "CLIENT_CAPABILITIES",
    "CLIENT_INFO",
    "DEFAULT_LOOKUP_METHOD",
    "LEGACY",
    "MODERN",
    "OLDER_VERSIONS",
    "RELATED_TASK_META_KEY",
    "SESSION_HEADER",
    "SUBMISSION_KEY_EXTENSION",
    "SYNC_TIMEOUT_META_KEY",
    "TASKS_EXTENSION",
    "TOOLS_LIST_CHANGED",
    "Dialect",
    "ModernDialect",
    "RpcAnswer",
    "RpcChannel",
    "RpcReply",
    "call",
    "dialect_of",
    "header_value",
    "open_session",
    "post",
]
